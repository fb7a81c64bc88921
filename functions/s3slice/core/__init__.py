"""The values and names every layer shares: the request's value types and its parsers
(``model``, ``table``), the names the CDK app shares with the function (``contract``), the
typed errors (``errors``), the settings read from the environment (``settings``), byte
ranges (``ranges``), the one rule for values written as text (``values``) and a request's
price (``cost``).

``contract`` and ``errors`` use only the standard library: the CDK app loads them by path.
Importing this package imports none of its modules.
"""
