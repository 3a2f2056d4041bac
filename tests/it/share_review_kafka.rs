//! An adversarial review of `ShareReader` (KIP-932) on Apache Kafka 4.4: cancel safety, the
//! stream, explicit-mode edge cases, many members on few partitions, subscription changes,
//! topics created late or deleted, hangs, stats, and Drop. The tests of the first part each
//! failed on the reviewed code (before the fixes of commit "share: review mends") and say what
//! they expect; the others pin down behaviour `share_kafka.rs` does not.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use integration_tests::{create_topic, kafka, unique_topic};

use super::share_kafka::{
    group_configs, lags, reader, topic_and_group, topic_and_group_with, transport, value, write_on,
};
use kafkit::{
    AcknowledgeType, AcknowledgementMode, Client, Error, ShareError, ShareReader, ShareRecord,
    Transport,
};
use tokio::time::Instant;

/// The bound on every wait of these tests.
const T: Duration = Duration::from_secs(60);

/// Writes `per_partition` records `<tag>-p<partition>-<i>` to each of `partitions`.
async fn write_tagged(
    topic: &str,
    partitions: i32,
    per_partition: usize,
    tag: &str,
) -> BTreeSet<String> {
    write_on(&transport(), topic, partitions, per_partition, tag).await
}

async fn write(topic: &str, partitions: i32, per_partition: usize) -> BTreeSet<String> {
    write_tagged(topic, partitions, per_partition, "v").await
}

/// Polls until `n` records came (or the bound).
async fn poll_n(reader: &mut ShareReader, n: usize) -> Vec<ShareRecord> {
    let deadline = Instant::now() + T;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} records within {T:?}",
            got.len()
        );
        got.extend(
            bounded(reader.poll(Duration::from_secs(1)))
                .await
                .expect("poll"),
        );
    }
    got
}

/// The stream's next item.
async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

/// Awaits `f`, failing the test when it takes more than 20 s (a hang).
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the call returned within 20 s")
}

/// Waits (bounded) for lag 0 on every partition.
async fn lag_zero(group: &str, topic: &str, partitions: i32) {
    let deadline = Instant::now() + T;
    loop {
        let l = lags(group, topic, partitions).await;
        if l.values().all(|x| *x == Some(0)) {
            return;
        }
        assert!(Instant::now() < deadline, "lag 0 everywhere: {l:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `r` until it is assigned something (records that come meanwhile are returned).
async fn until_assigned(r: &mut ShareReader) -> Vec<ShareRecord> {
    let deadline = Instant::now() + T;
    let mut got = Vec::new();
    while r.stats().assigned_partitions == 0 || r.stats().member_epoch <= 0 {
        assert!(Instant::now() < deadline, "assigned: {:?}", r.stats());
        got.extend(
            bounded(r.poll(Duration::from_millis(200)))
                .await
                .expect("poll"),
        );
    }
    got
}

// ---------------------------------------------------------------------------------------------
// The review's defects: each of these failed before the fixes.
// ---------------------------------------------------------------------------------------------

/// A poll that waits longer than `max_poll_interval` (an idle topic, `poll(6 s)` with a 3 s
/// interval) is the application polling, not stalling: Java resets its poll timer on every
/// round of its poll loop and never leaves during a poll. Expected: the member keeps its
/// epoch and the next poll is `Ok`. Before the fix: the member task sees `last_poll` (set only at
/// the start of a poll, `begin_poll` in share/mod.rs) go stale, leaves the group mid-poll
/// (member.rs `step`), and the next poll fails with `MaxPollIntervalExceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_longer_than_max_poll_interval_is_no_stall() {
    let (topic, group) = topic_and_group("share-rv-longpoll", 1).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_interval(Duration::from_secs(3))
        .build()
        .expect("share reader");
    until_assigned(&mut r).await;
    let got = bounded(r.poll(Duration::from_secs(6)))
        .await
        .expect("long poll");
    assert!(got.is_empty());
    let epoch = r.stats().member_epoch;
    let next = bounded(r.poll(Duration::from_millis(100))).await;
    assert!(
        next.is_ok() && epoch > 0,
        "a 6 s poll with max_poll_interval 3 s: epoch after it {epoch}, next poll {next:?}"
    );
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// Implicit mode, `stream()`: the application takes one record and drops the stream (e.g.
/// `stream.next()` once, or `take(1)`). The stream had buffered the rest of the poll, marked
/// as handed out; the next `poll` accepts them all (implicit acknowledgement) though the
/// application never saw them: silent loss. Expected: every record written is handed to the
/// application at least once. Before the fix: only the first is; the others are accepted unseen
/// (lag 0). Code: `ShareStream` (share/mod.rs) keeps handed-out records in its own `buffer`,
/// which is dropped with it; `begin_poll` then accepts `delivered`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_fetched_for_a_dropped_stream_are_not_accepted_unseen() {
    let (topic, group) = topic_and_group("share-rv-streamdrop", 1).await;
    let values = write(&topic, 1, 10).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Implicit);
    let mut seen = BTreeSet::new();
    {
        let mut s = r.stream();
        let first = bounded(next(&mut s))
            .await
            .expect("an item")
            .expect("a record");
        seen.insert(value(&first));
    }
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline && seen.len() < values.len() {
        for rec in bounded(r.poll(Duration::from_millis(500)))
            .await
            .expect("poll")
        {
            seen.insert(value(&rec));
        }
    }
    r.close(Duration::from_secs(10)).await.expect("close");
    let l = lags(&group, &topic, 1).await;
    assert_eq!(
        seen.len(),
        values.len(),
        "records the application saw: {seen:?}; the group's lag: {l:?} (0: the rest were \
         accepted without being handed out)"
    );
}

/// Explicit mode, `stream()`: the application takes one record, acknowledges it, and drops
/// the stream. Expected: the reader can go on (the records the stream buffered and never
/// yielded are not the application's to acknowledge). Before the fix: every later `poll` fails with
/// `UnacknowledgedRecords` for records the application never got and cannot acknowledge:
/// the reader is wedged until `close`. Code: `ShareStream`'s `buffer` (share/mod.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_leaves_an_explicit_reader_usable() {
    let (topic, group) = topic_and_group("share-rv-streamwedge", 1).await;
    write(&topic, 1, 10).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    let ack = r.acknowledger();
    {
        let mut s = r.stream();
        let first = bounded(next(&mut s))
            .await
            .expect("an item")
            .expect("a record");
        ack.acknowledge(&first, AcknowledgeType::Accept)
            .expect("accept");
    }
    let next = bounded(r.poll(Duration::from_secs(1))).await;
    r.close(Duration::from_secs(10)).await.expect("close");
    assert!(
        next.is_ok(),
        "the poll after a dropped stream whose one yielded record was acknowledged: {next:?}"
    );
}

/// The acknowledger (or the reader) takes a record another reader handed out (here: a
/// reader of another group, on the same topic, holding the same offset). The docs of
/// `acknowledge` promise `NotAcknowledgeable` "for a record this reader did not hand out".
/// Before the fix: `Ok`, and the call acknowledges this reader's own record at that offset
/// (a record the application never decided on), while the other reader's record stays
/// unacknowledged. Code: `acknowledge` (share/mod.rs) looks the record up by (topic id,
/// partition, offset) only; a `ShareRecord` carries no mark of the reader that made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_readers_record_is_not_acknowledgeable() {
    let (topic, g1) = topic_and_group("share-rv-foreign", 1).await;
    let g2 = unique_topic("g-share-rv-foreign-2");
    group_configs(&transport(), &g2, &[]).await;
    write(&topic, 1, 3).await;
    let mut a = reader(&g1, &topic, AcknowledgementMode::Explicit);
    let mut b = reader(&g2, &topic, AcknowledgementMode::Explicit);
    let _mine = poll_n(&mut a, 3).await;
    let theirs = poll_n(&mut b, 3).await;
    let r = a.acknowledge(&theirs[0], AcknowledgeType::Reject);
    a.close(Duration::from_secs(10)).await.expect("close");
    b.close(Duration::from_secs(10)).await.expect("close");
    assert!(
        matches!(r, Err(Error::Share(ShareError::NotAcknowledgeable { .. }))),
        "acknowledging another reader's record: {r:?}"
    );
}

/// After `close`, an acknowledger still held by the application (e.g. by a worker task) is
/// used. Expected: `ShareError::Closed` (Java: IllegalStateException "already closed").
/// Before the fix: `NotAcknowledgeable` ("not handed out by this reader, or already sent") for a
/// record the reader did hand out, which misleads; and where close could not send the
/// release, `Ok` for an acknowledgement that is never sent. Code: `acknowledge`
/// (share/mod.rs) does not look at whether the reader closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_after_close_says_closed() {
    let (topic, group) = topic_and_group("share-rv-ackclosed", 1).await;
    write(&topic, 1, 2).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    let held = poll_n(&mut r, 2).await;
    let ack = r.acknowledger();
    r.close(Duration::from_secs(10)).await.expect("close");
    let after = ack.acknowledge(&held[0], AcknowledgeType::Accept);
    assert!(
        matches!(after, Err(Error::Share(ShareError::Closed))),
        "acknowledge after close: {after:?}"
    );
}

/// `ShareStats::records_delivered` is documented as "Records acquired and handed to the
/// reader". With `max_poll_records(2)` one poll hands out 2 records, but the counter says how
/// many the ShareFetch acquired (all 10 of the batch): it is bumped when an answer is
/// decoded (fetch.rs `records`), not when `hand_out` hands them out; records released at
/// close unseen are counted as delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_delivered_counts_only_records_handed_out() {
    let (topic, group) = topic_and_group("share-rv-stats", 1).await;
    write(&topic, 1, 10).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(2)
        .build()
        .expect("share reader");
    let got = poll_n(&mut r, 1).await;
    let stats = r.stats();
    r.close(Duration::from_secs(10)).await.expect("close");
    assert_eq!(
        stats.records_delivered,
        got.len() as u64,
        "handed out {} records: {stats:?}",
        got.len()
    );
}

/// A broker that stops answering (the relay black-holes every frame, connections stay open):
/// every `poll(500 ms)` must still return within its timeout plus a little. Before the fix: once the
/// ShareFetch in flight times out (request timeout 2 s here), the next poll calls `route`,
/// whose Metadata look-up (`Transport::metadata_for`, bounded only by the transport's
/// `default_api_timeout`, 15 s here) the poll does not bound by its own deadline; the
/// ShareFetch connection's dial (`ready_conn`) is not bounded by it either. Code: `poll`
/// and `settle` (share/mod.rs) await `Fetcher::route` and `send_all` unbounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_keeps_its_timeout_when_the_broker_stops_answering() {
    let (_one, relay) = integration_tests::kafka_relay().await;
    let (topic, group) = topic_and_group("share-rv-blackhole", 1).await;
    write(&topic, 1, 3).await;
    let t = Transport::builder([relay.addr()])
        .dialer(
            kafkit::Dialer::builder()
                .request_timeout(Duration::from_secs(2))
                .connect_timeout(Duration::from_secs(2))
                .build(),
        )
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    let mut r = ShareReader::builder(t, group.as_str())
        .topics([topic.as_str()])
        .build()
        .expect("share reader");
    poll_n(&mut r, 3).await;
    relay.black_hole(true);
    let mut worst = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let started = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(30), r.poll(Duration::from_millis(500)))
            .await
            .expect("returned within 30 s");
        worst = worst.max(started.elapsed());
    }
    let started = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(30), r.commit(Duration::from_secs(1))).await;
    let commit_took = started.elapsed();
    let started = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(30), r.close(Duration::from_secs(2))).await;
    let close_took = started.elapsed();
    relay.black_hole(false);
    assert!(
        worst < Duration::from_millis(2500) && commit_took < Duration::from_secs(3),
        "poll(500 ms) took up to {worst:?}; commit(1 s) {commit_took:?}; close(2 s) {close_took:?}"
    );
}

/// Implicit mode, `max_poll_records(1)`, one ShareFetch acquiring 10 records (a 15 s lock):
/// each poll accepts the record of the poll before and hands out one of those fetched. While
/// the locks are fresh the acceptances wait for the next ShareFetch to ride on (no request of
/// their own: in the common case it is milliseconds away); once half the lock is gone, the
/// next poll sends them with a ShareAcknowledge. Before the fix they waited for the next
/// ShareFetch whatever the locks said (`acknowledgements_sent` 0 after the locks ran out), and
/// the first fix (a ShareAcknowledge at every poll handing out fetched records) doubled the
/// requests of `kafkit-bench share` and halved its records/s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptances_go_before_their_locks_are_half_gone() {
    let (topic, group) = topic_and_group_with(
        "share-rv-ackdelay",
        1,
        &[("share.record.lock.duration.ms", "15000")],
    )
    .await;
    write(&topic, 1, 10).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(1)
        .build()
        .expect("share reader");
    let first = poll_n(&mut r, 1).await;
    let lock_deadline = first[0].acquisition_lock_deadline();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = bounded(r.poll(Duration::from_secs(1))).await.expect("poll");
        assert_eq!(got.len(), 1);
    }
    let fresh = r.stats();
    assert_eq!(
        (
            fresh.share_acknowledge_requests,
            fresh.acknowledgements_sent
        ),
        (0, 0),
        "fresh locks: the acceptances wait for a ShareFetch: {fresh:?}"
    );
    // Past half the lock (7.5 s of 15 s), the next poll sends what the polls accepted.
    let half = lock_deadline - Duration::from_millis(7_000);
    tokio::time::sleep_until(Instant::from_std(half)).await;
    let got = bounded(r.poll(Duration::from_secs(1))).await.expect("poll");
    assert_eq!(got.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.stats().acknowledgements_sent < 6 {
        assert!(
            Instant::now() < deadline,
            "sent once the locks were half gone: {:?}",
            r.stats()
        );
        // A poll reads the ShareAcknowledge's answer (and hands out one more record).
        let _ = bounded(r.poll(Duration::from_millis(100)))
            .await
            .expect("poll");
    }
    assert!(std::time::Instant::now() < lock_deadline, "within the lock");
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// The consequence of the above: the lock (15 s, the least Kafka allows) runs out on records
/// the application processed and accepted well within it (1 s each), because their
/// acceptances waited for the 20 fetched records to be handed out (20 s). Expected: the
/// records processed within the lock are accepted (at most the last few fail), none comes
/// again. Before the fix: their acceptances come back INVALID_RECORD_STATE and the records are
/// delivered again (delivery count 2): duplicate processing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_accepted_within_their_lock_are_not_delivered_again() {
    let (topic, group) = topic_and_group_with(
        "share-rv-acklate",
        1,
        &[("share.record.lock.duration.ms", "15000")],
    )
    .await;
    write(&topic, 1, 20).await;
    let failed = Arc::new(Mutex::new(BTreeSet::new()));
    let f = failed.clone();
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(1)
        .acknowledgement_commit_callback(move |c| {
            if c.result.is_err() {
                f.lock().unwrap().extend(c.offsets.iter().copied());
            }
        })
        .build()
        .expect("share reader");
    let first = poll_n(&mut r, 1).await;
    let lock_deadline = first[0].acquisition_lock_deadline();
    let mut again = Vec::new();
    let mut processed_in_time = BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(26);
    let mut current = first;
    while Instant::now() < until {
        // "Process" the record handed out: 1 s.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for rec in &current {
            if std::time::Instant::now() + Duration::from_millis(500) < lock_deadline {
                processed_in_time.insert(rec.offset);
            }
            if rec.delivery_count() > 1 {
                again.push(rec.offset);
            }
        }
        current = bounded(r.poll(Duration::from_millis(500)))
            .await
            .expect("poll");
    }
    bounded(r.commit(Duration::from_secs(5)))
        .await
        .expect("commit");
    r.close(Duration::from_secs(10)).await.expect("close");
    let failed = failed.lock().unwrap().clone();
    let lost: BTreeSet<i64> = failed.intersection(&processed_in_time).copied().collect();
    assert!(
        lost.is_empty() && again.iter().all(|o| !processed_in_time.contains(o)),
        "accepted within the lock yet refused: {lost:?}; delivered again: {again:?}; \
         processed in time: {processed_in_time:?}"
    );
}

/// Explicit mode: a Renew not yet sent when `close` runs, with an Accept beside it. Close
/// must still send the Accept (the accepted record never comes back) and release the rest at
/// once. (Probe: close sends the pending Renew as is, in its epoch -1 ShareAcknowledge with
/// `IsRenewAck`, beside the releases.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_an_unsent_renew_keeps_the_accept_and_releases_the_rest() {
    let (topic, group) = topic_and_group("share-rv-renewclose", 1).await;
    write(&topic, 1, 3).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let o = outcomes.clone();
    let mut a = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .acknowledgement_commit_callback(move |c| {
            o.lock()
                .unwrap()
                .push((c.offsets.clone(), format!("{:?}", c.result)));
        })
        .build()
        .expect("share reader");
    let held = poll_n(&mut a, 3).await;
    a.acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("accept");
    a.acknowledge(&held[1], AcknowledgeType::Renew)
        .expect("renew");
    let started = Instant::now();
    bounded(a.close(Duration::from_secs(10)))
        .await
        .expect("close");
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 2).await;
    let took = started.elapsed();
    let more = bounded(b.poll(Duration::from_secs(1))).await.expect("poll");
    b.close(Duration::from_secs(10)).await.expect("close");
    let offsets: BTreeSet<i64> = got.iter().chain(&more).map(|x| x.offset).collect();
    assert!(
        offsets == [1, 2].into() && took < Duration::from_secs(20),
        "came again: {offsets:?} after {took:?}; close's outcomes {:?}",
        outcomes.lock().unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Behaviour that holds (kept: share_kafka.rs does not assert it).
// ---------------------------------------------------------------------------------------------

/// Polls cancelled part way again and again (a 1-50 ms timeout around each) while records
/// flow, implicit mode: no record is lost or handed out twice, and the group's lag ends at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_polls_lose_and_duplicate_nothing() {
    let (topic, group) = topic_and_group("share-rv-cancelpoll", 2).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(7)
        .build()
        .expect("share reader");
    let writing = tokio::spawn({
        let topic = topic.clone();
        async move {
            let mut all = BTreeSet::new();
            for round in 0..10 {
                all.extend(write_tagged(&topic, 2, 20, &format!("r{round}")).await);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            all
        }
    });
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let deadline = Instant::now() + T;
    let mut cancelled = 0;
    let mut i = 0u64;
    while seen.len() < 400 {
        assert!(Instant::now() < deadline, "{} of 400 records", seen.len());
        i += 1;
        let limit = Duration::from_millis(1 + (i * 7) % 50);
        match tokio::time::timeout(limit, r.poll(Duration::from_secs(1))).await {
            Ok(got) => {
                for rec in got.expect("poll") {
                    *seen.entry(value(&rec)).or_default() += 1;
                }
            }
            Err(_) => cancelled += 1,
        }
    }
    let values = writing.await.expect("writer task");
    // One more (uncancelled) poll accepts the last ones.
    let extra = bounded(r.poll(Duration::from_secs(1))).await.expect("poll");
    for rec in extra {
        *seen.entry(value(&rec)).or_default() += 1;
    }
    r.close(Duration::from_secs(10)).await.expect("close");
    assert!(cancelled > 10, "polls cancelled: {cancelled}");
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), values);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handed out twice: {twice:?}");
    lag_zero(&group, &topic, 2).await;
}

/// Explicit mode: commits cancelled part way (1-20 ms) again and again lose no
/// acknowledgement: after one commit that is let finish, the group's lag is 0 and nothing is
/// delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_commits_lose_no_acknowledgement() {
    let (topic, group) = topic_and_group("share-rv-cancelcommit", 2).await;
    write(&topic, 2, 50).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .max_poll_records(10)
        .build()
        .expect("share reader");
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + T;
    let mut i = 0u64;
    while seen.len() < 100 {
        assert!(Instant::now() < deadline, "{} of 100", seen.len());
        let got = bounded(r.poll(Duration::from_secs(1))).await.expect("poll");
        for rec in &got {
            assert!(seen.insert(value(rec)), "delivered twice: {}", value(rec));
            r.acknowledge(rec, AcknowledgeType::Accept).expect("accept");
        }
        i += 1;
        let limit = Duration::from_millis(1 + (i * 3) % 20);
        let _ = tokio::time::timeout(limit, r.commit(Duration::from_secs(5))).await;
    }
    bounded(r.commit(Duration::from_secs(10)))
        .await
        .expect("commit");
    assert!(
        bounded(r.poll(Duration::from_secs(1)))
            .await
            .expect("poll")
            .is_empty()
    );
    r.close(Duration::from_secs(10)).await.expect("close");
    lag_zero(&group, &topic, 2).await;
}

/// Implicit mode with `max_poll_records(3)`: a ShareFetch acquires more than a poll hands out;
/// the rest come with the next polls (not fetched again), and at close the records fetched
/// and not handed out, and the last poll's, are released: another member gets them at once
/// (well within the 30 s lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_records_are_handed_out_next_and_released_at_close() {
    let (topic, group) = topic_and_group("share-rv-leftover", 1).await;
    write(&topic, 1, 20).await;
    let mut a = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(3)
        .build()
        .expect("share reader");
    let first = poll_n(&mut a, 1).await;
    assert_eq!(first.len(), 3);
    let second = bounded(a.poll(Duration::from_secs(1))).await.expect("poll");
    assert_eq!(second.len(), 3, "the leftovers come next");
    let offsets: Vec<i64> = first.iter().chain(&second).map(|x| x.offset).collect();
    assert_eq!(offsets, (0..6).collect::<Vec<_>>());
    let started = Instant::now();
    bounded(a.close(Duration::from_secs(10)))
        .await
        .expect("close");
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let rest = poll_n(&mut b, 17).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "released, not timed out"
    );
    let offsets: BTreeSet<i64> = rest.iter().map(|x| x.offset).collect();
    assert_eq!(
        offsets,
        (3..20).collect(),
        "the first poll's 3 were accepted"
    );
    // The next poll accepts them (close would release them, as Java's implicit mode does).
    assert!(
        bounded(b.poll(Duration::from_millis(500)))
            .await
            .expect("poll")
            .is_empty()
    );
    b.close(Duration::from_secs(10)).await.expect("close");
    lag_zero(&group, &topic, 1).await;
}

/// Five members on two partitions (share groups allow more members than partitions): every
/// record is handed out and accepted once among them, more than two members get work, and the
/// lag ends at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_on_two_partitions_share_the_work_once() {
    let (topic, group) = topic_and_group("share-rv-five", 2).await;
    let mut members: Vec<ShareReader> = (0..5)
        .map(|_| {
            ShareReader::builder(transport(), group.as_str())
                .topics([topic.as_str()])
                .max_poll_records(5)
                .acquire_mode(kafkit::ShareAcquireMode::RecordLimit)
                .build()
                .expect("share reader")
        })
        .collect();
    for m in &mut members {
        assert!(until_assigned(m).await.is_empty());
    }
    let values = write(&topic, 2, 100).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_member = [0usize; 5];
    let deadline = Instant::now() + T;
    while seen.len() < values.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {}",
            seen.len(),
            values.len()
        );
        for (i, m) in members.iter_mut().enumerate() {
            for rec in bounded(m.poll(Duration::from_millis(100)))
                .await
                .expect("poll")
            {
                per_member[i] += 1;
                *seen.entry(value(&rec)).or_default() += 1;
            }
        }
    }
    for m in &mut members {
        assert!(
            bounded(m.poll(Duration::from_millis(200)))
                .await
                .expect("poll")
                .is_empty()
        );
    }
    for m in members {
        bounded(m.close(Duration::from_secs(10)))
            .await
            .expect("close");
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handed out twice: {twice:?}");
    assert!(
        per_member.iter().filter(|n| **n > 0).count() > 2,
        "more members than partitions got work: {per_member:?}"
    );
    lag_zero(&group, &topic, 2).await;
}

/// `subscribe` on a running reader moves it to another topic: the new topic's records come,
/// the old topic's records written after the change do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_moves_a_running_reader() {
    let (old, group) = topic_and_group("share-rv-sub-old", 1).await;
    let new = unique_topic("share-rv-sub-new");
    create_topic(&kafka(), &new, 2).await;
    write_tagged(&old, 1, 3, "old").await;
    let mut r = reader(&group, &old, AcknowledgementMode::Implicit);
    poll_n(&mut r, 3).await;
    r.subscribe([new.as_str()]).expect("subscribe");
    let values = write_tagged(&new, 2, 5, "new").await;
    let deadline = Instant::now() + T;
    let mut seen = BTreeSet::new();
    while seen.len() < values.len() {
        assert!(Instant::now() < deadline, "{seen:?}");
        for rec in bounded(r.poll(Duration::from_millis(500)))
            .await
            .expect("poll")
        {
            assert_eq!(&*rec.topic, new.as_str(), "{rec:?}");
            assert!(seen.insert(value(&rec)), "twice: {rec:?}");
        }
    }
    write_tagged(&old, 1, 3, "late").await;
    for _ in 0..4 {
        let got = bounded(r.poll(Duration::from_millis(500)))
            .await
            .expect("poll");
        assert!(got.is_empty(), "the old topic after subscribe: {got:?}");
    }
    let a = r.assignment();
    assert!(a.iter().all(|(t, _)| &**t == new.as_str()), "{a:?}");
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// A reader subscribed to a topic that does not exist yet does not create it and does not
/// fail; once the topic is made and written, its records come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_made_after_the_reader_started_is_read() {
    let topic = unique_topic("share-rv-late");
    let group = unique_topic("g-share-rv-late");
    group_configs(&transport(), &group, &[]).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Implicit);
    for _ in 0..4 {
        assert!(
            bounded(r.poll(Duration::from_millis(500)))
                .await
                .expect("poll")
                .is_empty()
        );
    }
    let md = transport()
        .metadata_for(&[topic.as_str()])
        .await
        .expect("metadata");
    let t = md.topics.iter().find(|t| t.name == topic);
    assert!(
        t.is_none_or(|t| t.partitions.is_empty()),
        "not created by the reader: {t:?}"
    );
    create_topic(&kafka(), &topic, 2).await;
    let values = write(&topic, 2, 5).await;
    let got = poll_n(&mut r, values.len()).await;
    assert_eq!(got.iter().map(value).collect::<BTreeSet<_>>(), values);
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// A topic deleted under a reader: polls go on (`Ok`, nothing), none hangs, no error stops
/// the reader; commit and close return within their timeouts; another topic of the same
/// subscription is still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_under_the_reader() {
    let (doomed, group) = topic_and_group("share-rv-deleted", 1).await;
    let kept = unique_topic("share-rv-kept");
    create_topic(&kafka(), &kept, 1).await;
    write_tagged(&doomed, 1, 5, "doomed").await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([doomed.as_str(), kept.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .build()
        .expect("share reader");
    let held = poll_n(&mut r, 5).await;
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    Client::new(transport())
        .delete_topics(&[doomed.as_str()])
        .await
        .expect("DeleteTopics");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for rec in &held {
        r.acknowledge(rec, AcknowledgeType::Accept).expect("accept");
    }
    let started = Instant::now();
    let c = bounded(r.commit(Duration::from_secs(5)))
        .await
        .expect("commit");
    outcomes
        .lock()
        .unwrap()
        .extend(c.into_iter().map(|o| (o.offsets, o.result.err())));
    let commit_took = started.elapsed();
    let values = write_tagged(&kept, 1, 5, "kept").await;
    let deadline = Instant::now() + T;
    let mut seen = BTreeSet::new();
    while seen.len() < values.len() {
        assert!(Instant::now() < deadline, "kept topic: {seen:?}");
        for rec in bounded(r.poll(Duration::from_millis(500)))
            .await
            .expect("poll")
        {
            seen.insert(value(&rec));
            r.acknowledge(&rec, AcknowledgeType::Accept)
                .expect("accept");
        }
    }
    let started = Instant::now();
    bounded(r.close(Duration::from_secs(5)))
        .await
        .expect("close");
    let close_took = started.elapsed();
    assert!(
        commit_took < Duration::from_secs(4) && close_took < Duration::from_secs(4),
        "commit took {commit_took:?}, close {close_took:?}; outcomes {:?}",
        outcomes.lock().unwrap()
    );
}

/// `stream()` in explicit mode with `acknowledger()`: each record acknowledged as it comes;
/// the stream goes on polling (no `UnacknowledgedRecords`), Release brings a record back, and
/// at the end the lag is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_works_in_explicit_mode() {
    let (topic, group) = topic_and_group("share-rv-stream", 2).await;
    let values = write(&topic, 2, 15).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .max_poll_records(4)
        .build()
        .expect("share reader");
    let ack = r.acknowledger();
    let mut accepted = BTreeSet::new();
    let mut released_once = false;
    {
        let mut s = r.stream();
        let deadline = Instant::now() + T;
        while accepted.len() < values.len() {
            assert!(
                Instant::now() < deadline,
                "{} of {}",
                accepted.len(),
                values.len()
            );
            let rec = bounded(next(&mut s))
                .await
                .expect("an item")
                .expect("a record");
            if !released_once {
                released_once = true;
                ack.acknowledge(&rec, AcknowledgeType::Release)
                    .expect("release");
                continue;
            }
            ack.acknowledge(&rec, AcknowledgeType::Accept)
                .expect("accept");
            assert!(accepted.insert(value(&rec)), "accepted twice: {rec:?}");
        }
    }
    bounded(r.commit(Duration::from_secs(10)))
        .await
        .expect("commit");
    r.close(Duration::from_secs(10)).await.expect("close");
    assert_eq!(accepted, values);
    lag_zero(&group, &topic, 2).await;
}

/// Explicit mode: Renew then Release of one record, Reject changed to Accept before it is
/// sent, and a renewed record still held at close: the released and the renewed-at-close
/// record go to another member at once; the accepted one never comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_then_release_and_renewed_at_close() {
    let (topic, group) = topic_and_group("share-rv-renew", 1).await;
    write(&topic, 1, 3).await;
    let mut a = reader(&group, &topic, AcknowledgementMode::Explicit);
    let held = poll_n(&mut a, 3).await;
    a.acknowledge(&held[0], AcknowledgeType::Renew)
        .expect("renew");
    let c = bounded(a.commit(Duration::from_secs(10)))
        .await
        .expect("commit");
    assert!(c.iter().all(|o| o.result.is_ok()), "{c:?}");
    a.acknowledge(&held[0], AcknowledgeType::Release)
        .expect("release after renew");
    a.acknowledge(&held[1], AcknowledgeType::Reject)
        .expect("reject");
    a.acknowledge(&held[1], AcknowledgeType::Accept)
        .expect("changed to accept");
    a.acknowledge(&held[2], AcknowledgeType::Renew)
        .expect("renew");
    let c = bounded(a.commit(Duration::from_secs(10)))
        .await
        .expect("commit");
    assert!(c.iter().all(|o| o.result.is_ok()), "{c:?}");
    // Held 2 is renewed, so it does not hold up a poll.
    assert!(bounded(a.poll(Duration::from_millis(300))).await.is_ok());
    let started = Instant::now();
    bounded(a.close(Duration::from_secs(10)))
        .await
        .expect("close");
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 2).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "released at once"
    );
    let offsets: BTreeSet<i64> = got.iter().map(|x| x.offset).collect();
    assert_eq!(offsets, [0, 2].into());
    b.close(Duration::from_secs(10)).await.expect("close");
}

/// Dropped without `close` (its runtime still running): the member leaves the group (the
/// group lists no member soon after) and another member gets the records it held well
/// within the 30 s lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reader_leaves_and_its_records_go_at_once() {
    let (topic, group) = topic_and_group("share-rv-drop", 1).await;
    write(&topic, 1, 4).await;
    let mut a = reader(&group, &topic, AcknowledgementMode::Explicit);
    poll_n(&mut a, 4).await;
    let started = Instant::now();
    drop(a);
    let admin = Client::new(transport());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let d = admin
            .describe_share_groups(&[group.as_str()], false)
            .await
            .expect("describe");
        let members = format!("{d:?}");
        let empty = d
            .iter()
            .all(|(_, g)| g.as_ref().is_ok_and(|g| g.members.is_empty()));
        if empty {
            break;
        }
        assert!(Instant::now() < deadline, "the member left: {members}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 4).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "released, not timed out"
    );
    assert!(got.iter().all(|x| x.delivery_count() == 2), "{got:?}");
    b.close(Duration::from_secs(10)).await.expect("close");
}
