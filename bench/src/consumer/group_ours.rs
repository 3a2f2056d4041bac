//! This project's side of the group bench: `--members` [`kafkit::GroupReader`]s in one group,
//! each with its own [`kafkit::Transport`], read with `next_batch` on one multi-threaded tokio
//! runtime.

use std::sync::Arc;
use std::time::Duration;

use kafkit::group_balancer::{
    CooperativeStickyAssignor, GroupBalancer, RangeAssignor, RoundRobinAssignor,
};
use kafkit::{
    AutoOffsetReset, GroupHandle, GroupReader, ListenerFuture, Reader, RebalanceListener, Transport,
};

use super::group::{Assignor, GroupResult, GroupWorkload, Progress};
use crate::cpu::CpuTime;

/// Reports each member's assignment changes to the run's [`Progress`].
struct Listener {
    member: usize,
    progress: Arc<Progress>,
}

impl RebalanceListener for Listener {
    fn on_partitions_assigned(
        &self,
        _group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        self.progress
            .assigned(self.member, partitions.into_iter().map(|(_, p)| p));
        Box::pin(async {})
    }

    fn on_partitions_revoked(
        &self,
        _group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        self.progress
            .revoked(self.member, partitions.into_iter().map(|(_, p)| p));
        Box::pin(async {})
    }
}

/// Runs the workload's group and measures it.
///
/// Errors: a message when the runtime or a member cannot be made, a member reports an error, or
/// the run stalls.
pub fn run(w: &GroupWorkload) -> Result<GroupResult, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let _guard = runtime.enter();
    let cpu0 = CpuTime::now()?;
    let progress = Arc::new(Progress::new(w));
    let mut tasks = Vec::new();
    for m in 0..w.group.members {
        let member = member(w, m, Arc::clone(&progress))?;
        tasks.push(runtime.spawn(drive(m, member, Arc::clone(&progress))));
    }
    let outcome = progress.wait();
    runtime.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
    });
    let cpu = CpuTime::now()?.since(cpu0);
    outcome.map(|()| progress.result(cpu))
}

fn member(w: &GroupWorkload, m: usize, progress: Arc<Progress>) -> Result<GroupReader, String> {
    let s = &w.read.settings;
    let g = &w.group;
    let transport = Transport::builder(w.read.bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let assignor: Arc<dyn GroupBalancer> = match g.assignor {
        Assignor::Range => Arc::new(RangeAssignor::new()),
        Assignor::Roundrobin => Arc::new(RoundRobinAssignor::new()),
        Assignor::CooperativeSticky => Arc::new(CooperativeStickyAssignor::new()),
    };
    GroupReader::builder(transport.clone(), w.group_id.clone())
        .subscribe([w.read.topic.clone()])
        .partition_assignment_strategy([assignor])
        .session_timeout(Duration::from_millis(g.session_timeout_ms))
        .heartbeat_interval(Duration::from_millis(g.heartbeat_interval_ms))
        .rebalance_listener(Arc::new(Listener {
            member: m,
            progress,
        }))
        .reader(
            Reader::builder(transport)
                .fetch_min_bytes(s.fetch_min_bytes)
                .fetch_max_wait(Duration::from_millis(s.fetch_max_wait_ms))
                .max_partition_fetch_bytes(s.max_partition_fetch_bytes)
                .fetch_max_bytes(s.fetch_max_bytes)
                .queued_max_bytes(s.queued_max_kbytes * 1024)
                .check_crcs(s.check_crcs)
                .fetch_sessions(crate::consumer::fetch_sessions())
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .build()
        .map_err(|e| format!("member {m}: {e}"))
}

/// One member's loop: read until told to stop (or, for the last member, until its share of
/// the records is read), then close (commit, LeaveGroup).
async fn drive(m: usize, mut member: GroupReader, progress: Arc<Progress>) {
    while !progress.stopped() {
        if progress.should_leave(m) {
            progress.leaving(m);
            break;
        }
        // next_batch is cancel safe; the timeout only lets the loop look at the flags.
        match tokio::time::timeout(Duration::from_millis(100), member.next_batch()).await {
            Err(_) => {}
            Ok(Err(e)) => {
                progress.abort(format!("member {m}: {e}"));
                break;
            }
            Ok(Ok(parts)) => {
                for part in &parts {
                    for r in &part.records {
                        progress.record(m, part.partition, r.offset, r.value.as_deref());
                    }
                }
            }
        }
    }
    member.close().await;
}
