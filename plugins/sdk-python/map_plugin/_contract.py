"""The version of the WIT contract (package `map-gateway:plugin` of the
gateway's `wit/`) this SDK is written against: the only place it is
spelled. tests/test_contract.py holds it equal to `wit/package.wit`."""

CONTRACT_VERSION = "0.2.4"
