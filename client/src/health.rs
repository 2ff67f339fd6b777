//! `colonnade health`: a grpc.health.v1 probe for shards, for container
//! health checks in images that have no shell (exit 0 when every shard is
//! SERVING).

use anyhow::{bail, Context};
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    /// Shard endpoints to probe, comma-separated host:port (https://host:port
    /// for TLS; a shard's plaintext --health-listen port needs no TLS).
    #[arg(long, env = "COLONNADE_SHARDS", value_delimiter = ',', required = true)]
    pub shards: Vec<String>,
    /// Give up on a shard after this many seconds.
    #[arg(long, env = "COLONNADE_HEALTH_TIMEOUT_SECS", default_value_t = 3)]
    pub timeout_secs: u64,
    /// Service name to check ("" is the whole server).
    #[arg(long, env = "COLONNADE_SERVICE", default_value = "colonnade.v1.Shard")]
    pub service: String,
    #[command(flatten, next_help_heading = "Connecting to shards")]
    pub connect: crate::cli::ConnectArgs,
}

pub async fn run(args: &HealthArgs, connector: &colonnade_setup::Connector) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    for endpoint in &args.shards {
        let status = probe(connector, endpoint, &args.service, timeout).await?;
        if status != ServingStatus::Serving {
            bail!("shard {endpoint}: {}", status.as_str_name());
        }
        println!("{endpoint}: SERVING");
    }
    Ok(())
}

/// Asks the shard at `endpoint` for the health of `service` ("" is the
/// whole server), giving up after `timeout`; errors name the endpoint.
pub async fn probe(
    connector: &colonnade_setup::Connector,
    endpoint: &str,
    service: &str,
    timeout: Duration,
) -> anyhow::Result<ServingStatus> {
    let probe = async {
        let channel = connector
            .endpoint(endpoint, timeout)?
            .connect()
            .await
            .map_err(|e| anyhow::anyhow!(colonnade_setup::explain(&e)))?;
        // The first call is where a plaintext client of a TLS shard fails:
        // said as such, not as h2's FRAME_SIZE_ERROR.
        let resp = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .map_err(|s| match std::error::Error::source(&s) {
                Some(_) => anyhow::anyhow!(connector.first_call_failed(endpoint, &s).reason),
                None => anyhow::anyhow!("{:?}: {}", s.code(), s.message()),
            })?
            .into_inner();
        anyhow::Ok(resp.status)
    };
    let status = tokio::time::timeout(timeout, probe)
        .await
        .with_context(|| format!("shard {endpoint}: no health answer within {timeout:?}"))?
        .with_context(|| format!("shard {endpoint}: health check failed"))?;
    ServingStatus::try_from(status)
        .map_err(|_| anyhow::anyhow!("shard {endpoint}: unknown health status {status}"))
}
