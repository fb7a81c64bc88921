"""CSV and JSON inputs: formats, compression, S3 Select's scan ranges, and the reader that
fetches and parses one text object.

Imports the value types, byte ranges, the fetch interface, settings and errors.
"""
