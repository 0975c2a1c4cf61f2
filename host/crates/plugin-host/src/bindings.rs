//! Host bindings generated from `wit/`: the current package (whose `plugin`
//! world holds every import and export) and the frozen 0.1.0 one in
//! `wit/v0.1.0`, which older components were built against.

wasmtime::component::bindgen!({
    path: "../../../wit",
    world: "plugin",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::exports::map_gateway::plugin as guest;
pub use self::map_gateway::plugin::types::{Caller, RpcError};

/// `map-gateway:plugin@0.1.0`.
pub mod contract_0_1 {
    wasmtime::component::bindgen!({
        path: "../../../wit/v0.1.0",
        world: "intercepting-extension",
        imports: { default: async | trappable },
        exports: { default: async },
    });

    pub use self::exports::map_gateway::plugin as guest;

    /// The 0.1.0 `http-handler` export, with the imports above.
    pub mod http {
        wasmtime::component::bindgen!({
            path: "../../../wit/v0.1.0",
            world: "http-extension",
            imports: { default: async | trappable },
            exports: { default: async },
            with: {
                "map-gateway:plugin/types": super::map_gateway::plugin::types,
                "map-gateway:plugin/store": super::map_gateway::plugin::store,
                "map-gateway:plugin/events": super::map_gateway::plugin::events,
                "map-gateway:plugin/router": super::map_gateway::plugin::router,
                "map-gateway:plugin/log": super::map_gateway::plugin::log,
                "map-gateway:plugin/config": super::map_gateway::plugin::config,
            },
        });
    }
}
