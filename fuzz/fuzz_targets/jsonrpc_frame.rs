#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| { map_gateway::fuzzing::target("jsonrpc_frame").expect("a target of map_gateway::fuzzing")(data) });
