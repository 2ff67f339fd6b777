//! What each token may do beyond the cluster scope every `Shard` call
//! checks (`colonnade_setup::Tokens`): the worker (cluster) token trains,
//! exports, takes checkpoints (of the newest complete version again or the
//! next one: [`crate::checkpoints`]) and restores a model to a version its
//! shard lists, the recovery every worker runs after a failure
//! (`train --rollback` too); rolling a model that has checkpoints back to its
//! initial state (`train --restart`) and dropping a model (with or without
//! its files) need the admin token. Without an admin token the cluster token
//! is the admin token.

use crate::registry::ShardCore;
use colonnade_proto::v1::RestoreRequest;
use colonnade_setup::{Scope, Tokens};
use tonic::{Request, Status};

/// Refuses (`PERMISSION_DENIED`) a worker's restore of model `fingerprint`
/// to its initial state while its shard lists checkpoint versions of it:
/// the model's trained history would be rolled back past every checkpoint.
pub fn check_restore(
    core: &ShardCore,
    tokens: &Tokens,
    request: &Request<RestoreRequest>,
) -> Result<(), Status> {
    let (fingerprint, version) = (
        request.get_ref().model_fingerprint,
        request.get_ref().version,
    );
    let metadata = request.metadata();
    // A model the shard does not hold: the restore itself says so (and no
    // checkpoint state is made up for it here).
    if version != 0
        || tokens.check(metadata, Scope::Admin).is_ok()
        || core.model(fingerprint).is_err()
    {
        return Ok(());
    }
    let listed: Vec<u64> = core
        .checkpoints(fingerprint)
        .versions()
        .iter()
        .map(|v| v.version)
        .collect();
    if listed.is_empty() {
        return Ok(());
    }
    Err(Status::permission_denied(format!(
        "restoring model {fingerprint:016x} to its initial state (version 0) needs the admin \
         token: this shard holds its checkpoint versions {listed:?}, which a restore to the \
         initial state would roll back past (`colonnade train --restart`, or a shard that lost \
         its checkpoints next to shards that kept them). Give the shard's --admin-token-file \
         token with --auth-token-file, or --rollback to the newest checkpoint every shard holds"
    )))
}
