"""``python -m s3slice`` and the ``s3slice`` script: the command line, in :mod:`s3slice.cli`."""

from s3slice.cli.command import main as main

if __name__ == "__main__":
    main()
