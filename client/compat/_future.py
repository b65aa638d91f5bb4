"""kafka-python's ``kafka.future.Future`` over a ``concurrent.futures.Future``.

kafka-python's futures have ``is_done``, ``value``, ``exception``, ``succeeded()``,
``failed()``, ``retriable()``, ``get(timeout)`` (seconds; ``KafkaTimeoutError`` when it
runs out) and ``add_callback`` / ``add_errback`` / ``add_both`` (extra arguments go
first, the value or exception last, as ``functools.partial`` does). Here the future
wraps the concurrent future raftka's blocking clients return, and converts its value
(raftka's ``RecordMetadata`` into kafka-python's shape) once, on first use.

Callbacks run where kafka-python runs them: on the client's own I/O thread when the
future completes there (raftka: the producer's loop thread), or at once in the caller
when the future is already done. An exception raised by a callback is logged and
does not stop the others, as in kafka-python.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from raftka.client.compat._options import ms_from_s
from raftka.common.errors import KafkaTimeoutError

__all__ = ["Future"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class Future(Generic[T]):
    """A pending result (kafka-python's ``kafka.future.Future``)."""

    __slots__ = ("_convert", "_converted", "_inner")

    def __init__(
        self,
        inner: concurrent.futures.Future[Any],
        convert: Callable[[Any], T] | None = None,
    ) -> None:
        self._inner = inner
        self._convert = convert
        self._converted: tuple[T] | None = None

    # ------------------------------------------------------------------ state

    @property
    def is_done(self) -> bool:
        return self._inner.done()

    @property
    def exception(self) -> BaseException | None:
        """The failure, once done (None while pending or after success)."""
        if not self._inner.done():
            return None
        if self._inner.cancelled():
            return concurrent.futures.CancelledError()
        return self._inner.exception()

    @property
    def value(self) -> T | None:
        """The result, once done successfully (None otherwise)."""
        if not self._inner.done() or self.exception is not None:
            return None
        return self._result()

    def _result(self) -> T:
        # Only called once the inner future succeeded.
        if self._converted is None:
            raw = self._inner.result()
            self._converted = (raw if self._convert is None else self._convert(raw),)
        return self._converted[0]

    def succeeded(self) -> bool:
        return self._inner.done() and self.exception is None

    def failed(self) -> bool:
        return self._inner.done() and self.exception is not None

    def retriable(self) -> bool:
        return self.failed() and bool(getattr(self.exception, "retriable", False))

    # ------------------------------------------------------------------ waiting

    def get(self, timeout: float | None = None) -> T:
        """Wait at most ``timeout`` seconds (None: as long as it takes); the value, or
        the failure raised; KafkaTimeoutError when the time runs out first."""
        ms_from_s("get", timeout)  # checks the value
        wait_s = None if timeout is None or timeout == float("inf") else timeout
        try:
            self._inner.exception(wait_s)
        except TimeoutError:
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.") from None
        except concurrent.futures.CancelledError:
            pass
        error = self.exception
        if error is not None:
            raise error
        return self._result()

    # ------------------------------------------------------------------ callbacks

    def add_callback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        """``f(*args, value, **kwargs)`` once the future succeeds."""
        fn = functools.partial(f, *args, **kwargs) if args or kwargs else f

        def on_done(_: concurrent.futures.Future[Any]) -> None:
            if self.succeeded():
                _run_logged(fn, self._result(), "callback")

        self._inner.add_done_callback(on_done)
        return self

    def add_errback(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        """``f(*args, exception, **kwargs)`` once the future fails."""
        fn = functools.partial(f, *args, **kwargs) if args or kwargs else f

        def on_done(_: concurrent.futures.Future[Any]) -> None:
            error = self.exception
            if error is not None:
                _run_logged(fn, error, "errback")

        self._inner.add_done_callback(on_done)
        return self

    def add_both(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[T]:
        """``f`` as both callback and errback."""
        self.add_callback(f, *args, **kwargs)
        return self.add_errback(f, *args, **kwargs)


def _run_logged(fn: Callable[[Any], Any], arg: Any, what: str) -> None:
    try:
        fn(arg)
    except Exception:
        log.exception("Error processing %s", what)
