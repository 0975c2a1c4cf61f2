#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| { map_gateway::fuzzing::target("plugin_result").expect("a target of map_gateway::fuzzing")(data) });
