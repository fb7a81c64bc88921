"""S3 Select's readings of values that polars reads otherwise, in the SQL polars runs:

- ``time_text``: ``TO_TIMESTAMP`` of timestamp text (``Z`` or an offset) and
  ``TO_STRING(timestamp, pattern)`` as polars SQL.
- ``zones``: a zone-less timestamp literal against a zoned column is UTC; a timestamp text
  or ``CAST`` of text is S3 Select's reading.
- ``text_numbers``: a text column compared with a number compares numbers.
- ``comparisons``: where a value meets literals (a comparison, ``BETWEEN``, ``IN``), for
  ``zones`` and ``text_numbers``.

``zones`` and ``text_numbers`` rewrite a query by its columns' types, once the frames are
known (:func:`s3slice.query.polars.sql.execute`).
"""
