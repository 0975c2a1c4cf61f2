//! What the gateway tells its operators: Prometheus metrics (`metrics`) and
//! the tracing spans every layer opens (`telemetry`). Installing the
//! exporters is the binary's job.

pub mod metrics;
pub mod telemetry;
