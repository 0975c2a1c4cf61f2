//! Cluster mode.
