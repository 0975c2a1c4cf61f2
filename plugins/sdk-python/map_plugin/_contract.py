"""The WIT contract (package `map-gateway:plugin` of the gateway's `wit/`)
this SDK is written against: the only place it is spelled.
tests/test_contract.py holds it equal to `wit/package.wit`."""

CONTRACT_PACKAGE = "map-gateway:plugin@0.2.6"
CONTRACT_VERSION = CONTRACT_PACKAGE.rsplit("@", 1)[1]
