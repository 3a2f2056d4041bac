//! The `GroupReader` daily calls (issue 33) with KIP-848 members, on Apache Kafka 4.4 only
//! (tansu has no ConsumerGroupHeartbeat): the bodies of `family/group_daily` (whose classic
//! runs are `on_kafka::group_daily` and `on_tansu::group_daily`) with
//! `GroupProtocol::Consumer`.

use kafkit::GroupProtocol;

use crate::on_kafka::group_daily::{
    commit_record_body, dropped_member_body, pause_body, resubscribe_body,
};

/// A paused partition of a KIP-848 member hands out nothing and keeps its assignment across
/// heartbeats; resumed, it is read from where it stopped; a revocation drops the pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_the_partition_and_hands_out_nothing_consumer() {
    pause_body(GroupProtocol::Consumer).await;
}

/// A running KIP-848 member changes its subscription: the next heartbeat names it, the
/// coordinator reassigns; unsubscribed, it revokes (commits) and leaves with epoch -1;
/// subscribed again, it joins at epoch 0 and resumes at its commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_changes_after_build_consumer() {
    resubscribe_body(GroupProtocol::Consumer).await;
}

/// `commit_record` from a KIP-848 member (OffsetCommit v10, the topic by id): offset + 1 and
/// the record's leader epoch, read back by OffsetFetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_record_commits_the_next_offset_with_the_leader_epoch_consumer() {
    commit_record_body(GroupProtocol::Consumer).await;
}

/// A KIP-848 member dropped at the end of its runtime's `block_on` has left the group (its
/// heartbeat with epoch -1 answered) once the drop returned.
#[test]
fn a_member_dropped_at_the_end_of_main_leaves_the_group_consumer() {
    dropped_member_body(GroupProtocol::Consumer);
}
