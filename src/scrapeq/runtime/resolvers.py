"""DNS resolvers of the fetcher: :class:`StaticResolver` (fixed answers, for demos and tests)
and :class:`GuardedResolver` (the SSRF guard: refuses a name any of whose addresses is
private). Split from :mod:`.fetch`, which re-exports both."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Final

import aiohttp
import aiohttp.abc

from scrapeq.engine.model.urls import is_private_address
from scrapeq.runtime.classify import BlockedAddress

__all__ = ["GuardedResolver", "StaticResolver"]

_NUMERIC_FLAGS: Final = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_ip(text: str) -> _IPAddress:
    """The address of a resolver result (an IPv6 zone id ``%eth0`` is dropped)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


class StaticResolver(aiohttp.abc.AbstractResolver):
    """Resolve some names to fixed addresses; every other name through a fallback resolver.

    For tests and the demo, to give loopback servers public-looking names. It does *not*
    bypass the SSRF guard: the :class:`Fetcher` checks what it returns like any answer.

    Args:
        mapping: host name (case-insensitive, no port) -> IP address text.
        fallback: the resolver for other names; default aiohttp's ``DefaultResolver``,
            created on first use. It is closed with this resolver.
    """

    def __init__(
        self, mapping: Mapping[str, str], fallback: aiohttp.abc.AbstractResolver | None = None
    ) -> None:
        self._mapping = {name.lower().rstrip("."): _parse_ip(ip) for name, ip in mapping.items()}
        self._fallback = fallback

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        ip = self._mapping.get(host.lower().rstrip("."))
        if ip is None:
            if self._fallback is None:
                self._fallback = aiohttp.DefaultResolver()
            return await self._fallback.resolve(host, port, family)
        found = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        if family not in (socket.AF_UNSPEC, found):
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: no address of family {family!r}")
        return [
            aiohttp.abc.ResolveResult(
                hostname=host, host=str(ip), port=port, family=found, proto=0, flags=_NUMERIC_FLAGS
            )
        ]

    async def close(self) -> None:
        if self._fallback is not None:
            await self._fallback.close()


def _refuse_private(host: str, results: list[aiohttp.abc.ResolveResult]) -> None:
    """Raise BlockedAddress when any resolved address of ``host`` is private."""
    for result in results:
        ip = _parse_ip(result["host"])
        if is_private_address(ip):
            raise BlockedAddress(
                f"{host} resolves to {ip}, a private address "
                "(set allow_private, or pass --allow-private)"
            )


class GuardedResolver(aiohttp.abc.AbstractResolver):
    """Wrap a resolver; refuse a name when any address it resolves to is private.

    Raises :class:`.classify.BlockedAddress` (not an ``OSError``, so aiohttp lets it
    through un-wrapped). Names in ``exempt`` are not checked: give them only to a resolver
    whose connections all go to those hosts (the fetcher's session of connections to its
    proxies), never to one that also connects to targets.

    Args:
        inner: the resolver that does the look-up.
        exempt: host names resolved without the check.
        owns_inner: close ``inner`` with this resolver (False: ``inner`` is shared and
            closed by its owner).
    """

    def __init__(
        self,
        inner: aiohttp.abc.AbstractResolver,
        *,
        exempt: frozenset[str] = frozenset(),
        owns_inner: bool = True,
    ) -> None:
        self._inner = inner
        self._exempt = frozenset(name.lower().rstrip(".") for name in exempt)
        self._owns_inner = owns_inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if host.lower().rstrip(".") not in self._exempt:
            _refuse_private(host, results)
        return results

    async def close(self) -> None:
        if self._owns_inner:
            await self._inner.close()
