//! The peer side of the group bench: `--members` librdkafka consumers (`BaseConsumer` with
//! `group.id` and `subscribe`) in one group, each polled message by message by a thread of its
//! own, with the fetch settings of [`super::peer`].

use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;

use super::group::{GroupResult, GroupWorkload, Progress};
use crate::cpu::CpuTime;

/// Reports each consumer's assignment changes to the run's [`Progress`] (after librdkafka's
/// default rebalance handling assigned or unassigned them).
struct Context {
    member: usize,
    progress: Arc<Progress>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self
                .progress
                .assigned(self.member, tpl.elements().iter().map(|e| e.partition())),
            Rebalance::Revoke(tpl) => self
                .progress
                .revoked(self.member, tpl.elements().iter().map(|e| e.partition())),
            Rebalance::Error(_) => {}
        }
    }
}

/// Runs the workload's group and measures it.
///
/// Errors: a message when a consumer cannot be made or subscribed, a poll returns an error, or
/// the run stalls.
pub fn run(w: &GroupWorkload) -> Result<GroupResult, String> {
    let cpu0 = CpuTime::now()?;
    let progress = Arc::new(Progress::new(w));
    let mut threads = Vec::new();
    for m in 0..w.group.members {
        let (w, progress) = (w.clone(), Arc::clone(&progress));
        threads.push(std::thread::spawn(move || drive(&w, m, &progress)));
    }
    let outcome = progress.wait();
    for t in threads {
        let _ = t.join();
    }
    let cpu = CpuTime::now()?.since(cpu0);
    outcome.map(|()| progress.result(cpu))
}

/// One consumer's loop: poll until told to stop (or, for the last member, until its share of
/// the records is read), then close the consumer (commit, LeaveGroup).
fn drive(w: &GroupWorkload, m: usize, progress: &Arc<Progress>) {
    let g = &w.group;
    let mut config = super::peer::config(&w.read);
    config
        .set("client.id", format!("kafkit-bench-rdkafka-{m}"))
        .set("group.id", &w.group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "true")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", g.assignor.name())
        .set("session.timeout.ms", g.session_timeout_ms.to_string())
        .set("heartbeat.interval.ms", g.heartbeat_interval_ms.to_string())
        .set("statistics.interval.ms", "0");
    let consumer: BaseConsumer<Context> = match config.create_with_context(Context {
        member: m,
        progress: Arc::clone(progress),
    }) {
        Ok(c) => c,
        Err(e) => return progress.abort(format!("rdkafka consumer {m}: {e}")),
    };
    if let Err(e) = consumer.subscribe(&[&w.read.topic]) {
        return progress.abort(format!("subscribe {m}: {e}"));
    }
    while !progress.stopped() {
        if progress.should_leave(m) {
            progress.leaving(m);
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => progress.record(m, msg.partition(), msg.offset(), msg.payload()),
            Some(Err(e)) => {
                progress.abort(format!("poll {m}: {e}"));
                break;
            }
            None => {}
        }
    }
    // Close here rather than in `drop`: rdkafka's `Drop` polls until the consumer is closed
    // and drops the messages those polls return, whose offsets librdkafka has stored and then
    // commits; polled here, they are handed out and counted.
    if let Err(e) = consumer.close_queue() {
        progress.abort(format!("close {m}: {e}"));
        return;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !consumer.closed() && std::time::Instant::now() < deadline {
        if let Some(Ok(msg)) = consumer.poll(Duration::from_millis(100)) {
            progress.record(m, msg.partition(), msg.offset(), msg.payload());
        }
    }
}
