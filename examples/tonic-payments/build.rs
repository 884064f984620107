//! Compiles `proto/payments.proto` with `protox`, a pure Rust protobuf compiler: no system
//! `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/payments.proto");
    let descriptors = protox::compile(["proto/payments.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
