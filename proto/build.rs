fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/colonnade/v1/shard.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .bytes(".colonnade.v1")
        .compile_protos(&[proto], &["proto"])?;
    Ok(())
}
