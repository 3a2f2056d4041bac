//! What a group member tells about itself, on librdkafka's mock cluster: `GroupStats`
//! (state, generation, protocol, assignment, rebalances, commits and their latency),
//! `GroupReader::lags` (the lag of each owned partition), and the tracing spans per join,
//! sync and commit.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::{GroupMock, partitions_of, unique_topic};
use kafkit::GroupReader;
use kafkit::group_balancer::RangeAssignor;

use super::group_mock::{GUARD, builder, write};

/// Reads every record of `want` with `r`, committing after each batch.
async fn read_all(r: &mut GroupReader, want: usize) {
    let deadline = tokio::time::Instant::now() + GUARD;
    let mut seen = 0;
    while seen < want {
        assert!(tokio::time::Instant::now() < deadline, "{seen} of {want}");
        let parts = tokio::time::timeout(Duration::from_millis(200), r.next_batch()).await;
        let Ok(parts) = parts else { continue };
        let parts = parts.expect("a batch");
        let n: usize = parts.iter().map(|p| p.records.len()).sum();
        if n > 0 {
            seen += n;
            r.commit().await.expect("commit");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_rebalances_commits_and_lag() {
    let mock = GroupMock::new(3);
    mock.initial_rebalance_delay(Duration::from_millis(200));
    let bootstrap = mock.bootstrap();
    let topic = unique_topic("group-stats");
    let group = unique_topic("g-stats");
    integration_tests::mock_topic_spread(&mock.cluster(), &topic, 3, 3);
    write(&bootstrap, &topic, 3, 10).await;
    let mut r = builder(&bootstrap, &group, &topic, Arc::new(RangeAssignor::new()))
        .enable_auto_commit(false)
        .build()
        .expect("member");
    let before = r.stats();
    assert_eq!((before.rebalances, before.commits), (0, 0));
    assert_eq!(before.generation, -1);
    assert!(before.commit_latency_avg.is_none() && before.commit_latency_last.is_none());
    read_all(&mut r, 30).await;
    let s = r.stats();
    let all: Vec<(String, i32)> = partitions_of(&[(&topic, 3)]).into_iter().collect();
    assert_eq!(s.state, "stable");
    assert_eq!(s.rebalances, 1);
    assert!(s.generation >= 1, "{s:?}");
    assert_eq!(s.protocol.as_deref(), Some("range"));
    assert_eq!(s.assignment, all);
    assert!(!s.member_id.is_empty());
    assert!(s.first_assignment.is_some() && s.last_rebalance.is_some());
    assert!(s.commits >= 1, "{s:?}");
    let (avg, max, last) = (
        s.commit_latency_avg.expect("mean"),
        s.commit_latency_max.expect("max"),
        s.commit_latency_last.expect("last"),
    );
    assert!(avg <= max && last <= max && max < GUARD, "{s:?}");
    // Everything read: no lag; new records: the lag shows them until they are read.
    let lags = r.lags();
    assert_eq!(
        lags.iter()
            .map(|(t, p, _)| (t.clone(), *p))
            .collect::<Vec<_>>(),
        all
    );
    assert!(lags.iter().all(|(_, _, l)| *l == Some(0)), "{lags:?}");
    write(&bootstrap, &topic, 3, 4).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        // The Reader's prefetching answers carry the new end; the position moves only when
        // records are handed out (no event to await: checked every 10 ms).
        let lagging: i64 = r.lags().iter().filter_map(|(_, _, l)| *l).sum();
        if lagging > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lag shows the new records"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    read_all(&mut r, 12).await;
    let lags = r.lags();
    assert!(lags.iter().all(|(_, _, l)| *l == Some(0)), "{lags:?}");
    assert!(r.stats().commits > s.commits);
    eprintln!("stats: {:?}", r.stats());
    r.close().await;
}

/// A subscriber that counts the spans opened by name.
#[derive(Default)]
struct Spans {
    names: Mutex<Vec<&'static str>>,
    next: AtomicU64,
}

impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.names.lock().unwrap().push(span.metadata().name());
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Every JoinGroup, SyncGroup and OffsetCommit of a member runs in its span (`join`, `sync`,
/// `commit`). The runtime is current-thread, so the member task runs where the subscriber
/// is the default.
#[test]
fn joins_syncs_and_commits_have_spans() {
    let spans = Arc::new(Spans::default());
    // Other tests of this process run group members on other threads at the same time.
    let _default = integration_tests::scoped_subscriber(Arc::clone(&spans));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mock = GroupMock::new(1);
        mock.initial_rebalance_delay(Duration::from_millis(100));
        let bootstrap = mock.bootstrap();
        let topic = unique_topic("group-spans");
        let group = unique_topic("g-spans");
        integration_tests::mock_topic_spread(&mock.cluster(), &topic, 2, 1);
        write(&bootstrap, &topic, 2, 3).await;
        let mut r = builder(&bootstrap, &group, &topic, Arc::new(RangeAssignor::new()))
            .enable_auto_commit(false)
            .build()
            .expect("member");
        read_all(&mut r, 6).await;
        let commits = r.stats().commits;
        r.close().await;
        let names = spans.names.lock().unwrap().clone();
        let count = |n: &str| names.iter().filter(|x| **x == n).count();
        eprintln!(
            "spans: {} join, {} sync, {} commit ({commits} commits)",
            count("join"),
            count("sync"),
            count("commit")
        );
        assert!(
            count("join") >= 1,
            "{:?}",
            names.iter().collect::<BTreeSet<_>>()
        );
        assert!(count("sync") >= 1);
        assert!(count("commit") as u64 >= commits && commits >= 1);
    });
}
