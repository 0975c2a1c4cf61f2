//! MAP core: sessions, agents, scopes, addressing, events, subscriptions and
//! replay, behind one entry point (`Gateway::start_frame`, in `gateway`) that
//! every transport calls. This file declares the modules and re-exports what
//! every one of them shares.

pub mod address;
pub mod agent_permissions;
mod answers;
pub mod asks;
pub mod auth_expiry;
pub mod credentials;
pub mod directory;
pub mod drain;
pub mod events;
pub mod ext_registry;
pub mod extensions;
pub mod fabric;
pub mod federation;
pub mod model;
mod operations;
pub mod outbox;
pub mod permissions;
pub mod registry;
pub mod reloads;
pub mod tenants;
pub use reloads::{Job as ReloadJob, State as ReloadState};
pub mod send;
mod tenant;
pub mod tracked;
pub use tenant::{Authenticated, Tenant, Tenants};

mod conn;
mod gateway;
mod lifecycle;
mod methods;
pub use conn::{Active, Conn, ConnState, Handled, Out, PROTOCOL_VERSION};
pub use gateway::{Gateway, Live};
pub use lifecycle::StreamRefused;
