"""Checks shared by the gRPC client scripts."""

import grpc


def expect_error(code, fn, message=None):
    """Run fn, which must fail with this gRPC status (and mention `message`)."""
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, f"expected {code}, got {e.code()}: {e.details()}"
        if message is not None:
            assert message in (e.details() or ""), f"{e.details()!r} should mention {message!r}"
        return e
    raise AssertionError(f"expected {code}, the call succeeded")
