"""Moving bytes: the ``Fetcher`` interface, its S3 (obstore, boto3 for keys obstore cannot
address), local and recording implementations, and the images objects are read into.

Imports only the value types, byte ranges, settings and errors.
"""
