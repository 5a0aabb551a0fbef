"""Type stubs of the kvdirect extension module (python/src; README.md is the manual).

maturin puts this file and a py.typed marker into the wheel, so type checkers
(mypy --strict) see the API below.
"""
from types import TracebackType
from typing import Literal, Optional, Sequence, Tuple, Type, Union

__version__: str

Key = Union[bytes, bytearray, str]
Value = Union[bytes, bytearray, str, int]
Mac = Union[str, bytes]

BatchOp = Union[
    Tuple[Literal["get"], Key],
    Tuple[Literal["put"], Key, Value],
    Tuple[Literal["delete"], Key],
    Tuple[Literal["compare_delete"], Key, Value],
    Tuple[Literal["incr"], Key],
    Tuple[Literal["incr"], Key, int],
    Tuple[Literal["cas"], Key, int, int],
]
BatchResult = Union[None, bytes, str, bool, int, BaseException]

class Error(Exception):
    # Set on the exception `batch` raises: the failed op's position.
    index: int

class UnreachableError(Error):
    reason: str

class StatusError(Error):
    status: str

class ConfigError(Error): ...

class TransactionAborted(Error):
    reason: str
    op: Optional[int]
    status: str
    results: list[Optional[Union[bytes, str]]]

# A function ("add", "sub", "swap", "cas", "min", "max", "and", "or", "xor") or
# predicate ("eq", "ne", "lt", "le", "gt", "ge", "any") by name, or an id 0-255.
Func = Union[str, int]

class Pipeline:
    def get(
        self, key: Key, *, equals: Optional[Value] = None, absent: bool = False
    ) -> "Pipeline": ...
    def put(self, key: Key, value: Value) -> "Pipeline": ...
    def delete(self, key: Key) -> "Pipeline": ...
    def compare_delete(self, key: Key, value: Value) -> "Pipeline": ...
    def incr(self, key: Key, delta: Optional[int] = None) -> "Pipeline": ...
    def cas(self, key: Key, expected: int, new: int) -> "Pipeline": ...
    def execute(self, *, return_exceptions: bool = False) -> list[BatchResult]: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "Pipeline": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Client:
    def __init__(
        self,
        iface: str,
        config: Optional[str] = None,
        *,
        server_ip: Optional[str] = None,
        server_mac: Optional[Mac] = None,
        client_ip: Optional[str] = None,
        client_mac: Optional[Mac] = None,
        qps: Optional[Sequence[Tuple[int, int]]] = None,
        partitions: Optional[int] = None,
        udp_src_port: Optional[int] = None,
        timeout: Optional[float] = None,
        connect_timeout: Optional[float] = None,
        decode_responses: bool = False,
        tenant_file: Optional[str] = None,
    ) -> None: ...
    @property
    def iface(self) -> str: ...
    # bytes, or str with decode_responses=True.
    def get(self, key: Key) -> Optional[Union[bytes, str]]: ...
    def put(self, key: Key, value: Value) -> None: ...
    def delete(self, key: Key) -> bool: ...
    def compare_delete(self, key: Key, value: Value) -> bool: ...
    def incr(self, key: Key, delta: Optional[int] = None) -> int: ...
    def cas(self, key: Key, expected: int, new: int) -> int: ...
    def batch(
        self, ops: Sequence[BatchOp], *, return_exceptions: bool = False
    ) -> list[BatchResult]: ...
    def pipeline(self, transaction: bool = False) -> Pipeline: ...
    def vput(self, key: Key, elements: Sequence[int], *, width: int = 8) -> None: ...
    def vget(
        self, key: Key, *, width: int = 8, signed: bool = False
    ) -> Optional[list[int]]: ...
    def vupdate(
        self,
        key: Key,
        func: Func,
        param: int,
        param2: Optional[int] = None,
        *,
        width: int = 8,
        signed: bool = False,
    ) -> list[int]: ...
    def vapply(
        self, key: Key, func: Func, deltas: Sequence[int], *, width: int = 8, signed: bool = False
    ) -> list[int]: ...
    def reduce(
        self,
        key: Key,
        func: Optional[Func] = None,
        *,
        init: Optional[int] = None,
        width: int = 8,
        signed: bool = False,
    ) -> int: ...
    def filter(
        self, key: Key, pred: Func, param: int, *, width: int = 8, signed: bool = False
    ) -> list[int]: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
