//! Offset look-up by time: ListOffsets (key 2).

use kafkit_protocol::messages::ListOffsetsRequest;

use crate::conn::Conn;
use crate::error::Result;
use crate::ops::offsets::{
    IsolationLevel, ListedOffset, OffsetSpec, list_offsets_request, list_offsets_results,
};

impl Conn {
    /// Looks up offsets (ListOffsets API) for each `(topic, partition, spec)` in `partitions`;
    /// this broker must lead them all.
    ///
    /// Returns one [`ListedOffset`] per entry of `partitions`, in the same order (as
    /// [`Conn::write_multi`] and [`Conn::fetch_multi`] do); per-partition failures are in its
    /// `error_code`, and a partition the broker leaves out of its answer is reported with
    /// `UNKNOWN_SERVER_ERROR`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty list or a
    /// partition listed twice (a request names each partition once),
    /// [`Error::UnsupportedVersion`](crate::Error::UnsupportedVersion) when the broker's
    /// ListOffsets is too old for a spec ([`OffsetSpec::min_version`]) or for `ReadCommitted`
    /// (v2), and those of [`Conn::request`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn list_offsets(
        &self,
        partitions: &[(&str, i32, OffsetSpec)],
        isolation_level: IsolationLevel,
    ) -> Result<Vec<ListedOffset>> {
        let version = self.version_for::<ListOffsetsRequest>(None)?;
        let req = list_offsets_request(partitions, isolation_level, version)?;
        let resp = self
            .request_at(&req, version, std::time::Duration::ZERO)
            .await?;
        Ok(list_offsets_results(partitions, resp))
    }
}
