"""Fixtures of the kvdirect tests.

The runner (scripts/e2e/python.sh) starts a dataplane on a TAP interface inside a
private network namespace and sets:

* ``KVD_IFACE``          the client's interface (``kvtap0``);
* ``KVD_CONFIG``         the configuration the dataplane runs with (``configs/tap.json``);
* ``KVD_DATAPLANE_PID``  the dataplane's PID (the "server gone" test pauses it).

Without ``KVD_IFACE`` the tests that need a server are skipped; the others
(argument checks, missing interface) still run.
"""

import json
import os
import pathlib
import secrets

import pytest

import kvdirect

REPO = pathlib.Path(__file__).resolve().parents[2]


def _config_path():
    cfg = os.environ.get("KVD_CONFIG", "configs/tap.json")
    p = pathlib.Path(cfg)
    if not p.is_absolute() and not p.exists():
        p = REPO / cfg
    return p


@pytest.fixture(scope="session")
def config_path():
    """Path of the dataplane's configuration file."""
    p = _config_path()
    if not p.exists():
        pytest.skip(f"no configuration file {p}")
    return p


@pytest.fixture(scope="session")
def config(config_path):
    """The dataplane's configuration (parsed JSON)."""
    return json.loads(config_path.read_text())


@pytest.fixture(scope="session")
def iface():
    """The client's interface (KVD_IFACE); skips when no dataplane is set up."""
    name = os.environ.get("KVD_IFACE")
    if not name:
        pytest.skip("KVD_IFACE not set (run scripts/e2e/python.sh)")
    return name


@pytest.fixture
def client(iface, config_path):
    """A connected client; closed after the test (only one at a time: clients of
    the same QPs would take the connection from each other)."""
    c = kvdirect.Client(iface, config=str(config_path), timeout=2.0)
    yield c
    c.close()


@pytest.fixture
def key(request):
    """A key prefix unique to this test run (the store outlives each test)."""
    token = secrets.token_hex(4)
    name = request.node.name.replace("[", "-").replace("]", "")[:40]
    return lambda suffix="": f"{name}-{token}-{suffix}".encode()


@pytest.fixture
def dataplane_pid():
    """The dataplane's PID (KVD_DATAPLANE_PID), or skip."""
    pid = os.environ.get("KVD_DATAPLANE_PID")
    if not pid:
        pytest.skip("KVD_DATAPLANE_PID not set")
    return int(pid)
