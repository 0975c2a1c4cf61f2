//! Host bindings generated from `wit/`. The imports are generated once (with
//! the richest world) and shared by the other worlds through `with`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "intercepting-extension",
    imports: { default: async | trappable },
    exports: { default: async },
});

/// Bindings of another world, reusing the import interfaces above.
macro_rules! world {
    ($module:ident, $world:literal) => {
        pub mod $module {
            wasmtime::component::bindgen!({
                path: "../wit",
                world: $world,
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
    };
}

world!(extension, "extension");
world!(observer, "send-observer");
world!(http, "http-extension");

pub use self::map_gateway::plugin::types::{Caller, RpcError};
