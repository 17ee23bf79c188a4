"""``client.kv(ns)``: key/value state outside a bundle, for ``Lanes`` and ``AsyncLanes``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lanes import _requests as R
from lanes._generated import models

if TYPE_CHECKING:
    from lanes._client import AsyncLanes, Lanes


class KV:
    """``client.kv(ns)``: transactional key/value state outside a bundle.

    Business outcomes are results, not errors: a lost condition or bound is
    ``applied=False`` with a ``reason`` (``exists``, ``version``, ``absent``, ``limit``, ``type``).
    """

    def __init__(self, client: Lanes, ns: str) -> None:
        self._c, self.ns = client, ns

    def get(self, key: str) -> models.KvResult:
        return self._c._call(R.kv_get(self.ns, key))

    def get_many(self, keys: Sequence[str]) -> models.KvResult:
        """Read several keys in one call: ``rows`` for those that exist, ``missing`` the rest."""
        return self._c._call(R.kv_one(R.kv_op("getMany", self.ns, keys=keys)))

    def get_prefix(
        self,
        prefix: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
    ) -> models.KvResult:
        """One page of the keys starting with ``prefix`` (non-empty), in key order. When
        ``truncated``, pass ``next_after`` as ``after`` for the next page."""
        op = R.kv_op(
            "getPrefix", self.ns, prefix=prefix, after=after, limit=limit, keys_only=keys_only
        )
        return self._c._call(R.kv_one(op))

    def put(
        self, key: str, value: Any, *, ttl_seconds: float | None = None, expect: int | None = None
    ) -> models.KvResult:
        """Write ``value`` (no ``ttl_seconds`` = forever). ``expect=0``: the key must not exist;
        ``expect=N``: its version must be N (else ``applied=False``)."""
        return self._c._call(R.kv_put(self.ns, key, value, ttl_seconds, expect))

    def put_if_absent(
        self, key: str, value: Any, *, ttl_seconds: float | None = None
    ) -> models.KvResult:
        """Write ``value`` only if the key does not exist (else ``applied=False``,
        ``reason="exists"`` with the current value)."""
        op = R.kv_op("putIfAbsent", self.ns, key, value=value, ttl_seconds=ttl_seconds)
        return self._c._call(R.kv_one(op))

    def incr(
        self,
        key: str,
        delta: int = 1,
        *,
        ttl_seconds: float | None = None,
        min: int | None = None,
        max: int | None = None,
    ) -> models.KvResult:
        """Add ``delta`` to a numeric key atomically (a missing key starts at 0 and gets
        ``ttl_seconds``, None = forever). Crossing ``min``/``max`` (inclusive) is not applied:
        ``applied=False, reason="limit"``."""
        op = R.kv_op("incr", self.ns, key, delta=delta, ttl_seconds=ttl_seconds, min=min, max=max)
        return self._c._call(R.kv_one(op))

    def delete(self, key: str, *, expect: int | None = None) -> models.KvResult:
        """Delete the key; with ``expect=N`` (>= 1) only if its version is N (else
        ``applied=False``, ``reason="version"`` or ``"absent"``)."""
        return self._c._call(R.kv_delete(self.ns, key, expect))

    def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.KvResult]:
        """Several ops (built with :func:`lanes.kv_op`) in one call."""
        return self._c._call(R.kv_batch(ops))

    def list(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
        include_expired: bool | None = None,
    ) -> models.KvListResult:
        """A page of the namespace's keys in key order (the console route; the prefix may be
        empty and expired rows can be included). Continue with ``after=page.next_after``."""
        return self._c._call(R.kv_list(self.ns, prefix, after, limit, keys_only, include_expired))


class AsyncKV:
    """``client.kv(ns)`` on :class:`AsyncLanes`; the same methods as :class:`KV`, awaited."""

    def __init__(self, client: AsyncLanes, ns: str) -> None:
        self._c, self.ns = client, ns

    async def get(self, key: str) -> models.KvResult:
        return await self._c._call(R.kv_get(self.ns, key))

    async def get_many(self, keys: Sequence[str]) -> models.KvResult:
        return await self._c._call(R.kv_one(R.kv_op("getMany", self.ns, keys=keys)))

    async def get_prefix(
        self,
        prefix: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
    ) -> models.KvResult:
        op = R.kv_op(
            "getPrefix", self.ns, prefix=prefix, after=after, limit=limit, keys_only=keys_only
        )
        return await self._c._call(R.kv_one(op))

    async def put(
        self, key: str, value: Any, *, ttl_seconds: float | None = None, expect: int | None = None
    ) -> models.KvResult:
        return await self._c._call(R.kv_put(self.ns, key, value, ttl_seconds, expect))

    async def put_if_absent(
        self, key: str, value: Any, *, ttl_seconds: float | None = None
    ) -> models.KvResult:
        op = R.kv_op("putIfAbsent", self.ns, key, value=value, ttl_seconds=ttl_seconds)
        return await self._c._call(R.kv_one(op))

    async def incr(
        self,
        key: str,
        delta: int = 1,
        *,
        ttl_seconds: float | None = None,
        min: int | None = None,
        max: int | None = None,
    ) -> models.KvResult:
        op = R.kv_op("incr", self.ns, key, delta=delta, ttl_seconds=ttl_seconds, min=min, max=max)
        return await self._c._call(R.kv_one(op))

    async def delete(self, key: str, *, expect: int | None = None) -> models.KvResult:
        return await self._c._call(R.kv_delete(self.ns, key, expect))

    async def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.KvResult]:
        return await self._c._call(R.kv_batch(ops))

    async def list(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
        include_expired: bool | None = None,
    ) -> models.KvListResult:
        return await self._c._call(
            R.kv_list(self.ns, prefix, after, limit, keys_only, include_expired)
        )
