//! Generates the `uap.v1` message types and their proto3 JSON mapping from
//! `proto/`, without protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from("proto");
    let files: Vec<PathBuf> =
        std::fs::read_dir(&dir)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "proto")).collect();
    println!("cargo:rerun-if-changed=proto");
    let set = protox::compile(&files, [&dir])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = prost_build::Config::new();
    config.extern_path(".google.protobuf", "::pbjson_types").compile_well_known_types().out_dir(&out);
    config.compile_fds(set.clone())?;
    let descriptors = prost::Message::encode_to_vec(&set);
    pbjson_build::Builder::new().register_descriptors(&descriptors)?.out_dir(&out).build(&[".uap.v1"])?;
    Ok(())
}
