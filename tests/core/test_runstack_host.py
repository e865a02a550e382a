"""`make run` on an IPv6 address (KOPE_HOST=::1): its port probe was IPv4 only, so it refused
with "Address family for hostname not supported", and its ready line named no usable URL."""

from __future__ import annotations

import socket

import pytest
from django.core.management import CommandError

from apps.workbench.management.commands.runstack import ensure_port_free, url_of


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="this host has no IPv6 loopback")
def test_an_ipv6_port_is_probed_over_ipv6() -> None:
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"^Port {port} on ::1 is already in use"):
            ensure_port_free("::1", port)
    ensure_port_free("::1", port)  # let go: free


def test_the_ready_url_puts_an_ipv6_address_in_brackets() -> None:
    assert url_of("::1", 8000) == "http://[::1]:8000/"
    assert url_of("127.0.0.1", 8000) == "http://127.0.0.1:8000/"
    assert url_of("localhost", 8000) == "http://localhost:8000/"
