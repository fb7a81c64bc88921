"""An embedded S3 on 127.0.0.1 (moto's server mode), for the demo and the tests.

moto is an optional dependency (``pip install s3slice[local]``); nothing in the Lambda
path imports this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

WSGIApp = Callable[..., Any]

LOCAL_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local-secret",
    "AWS_REGION": "us-east-1",
}


class LocalS3:
    """A real HTTP S3 endpoint on loopback, in a background thread of this process.

    ``middleware`` wraps moto's WSGI app, so tests can see every request the server gets.
    """

    def __init__(self, *, port: int = 0,
                 middleware: Callable[[WSGIApp], WSGIApp] | None = None) -> None:
        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError("the embedded S3 needs moto: pip install 's3slice[local]'") from e
        app: WSGIApp = DomainDispatcherApplication(create_backend_app)
        if middleware is not None:
            app = middleware(app)
        # werkzeug logs one access line per request; the server's own errors still show.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = make_server("127.0.0.1", port, app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="s3slice-local-s3", daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}"

    def start(self) -> LocalS3:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
