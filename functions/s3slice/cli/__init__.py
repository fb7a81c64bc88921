"""The ``s3slice`` command line: ``command`` parses and runs it, ``query`` turns its options
into the JSON request, ``invoke`` runs the Lambda handler in this process (for it and for
the demo), ``demo`` runs the whole path against ``local_s3``, an S3 server on loopback.
"""
