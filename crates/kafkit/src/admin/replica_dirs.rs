//! Replicas and their log directories (KIP-113): describe where given replicas live
//! (DescribeLogDirs naming their partitions, key 35) and move replicas between a broker's log
//! directories (AlterReplicaLogDirs, key 34). Each request goes to the replica's broker.

use std::collections::{BTreeMap, HashMap};

use kafkit_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, DescribeLogDirsRequest,
    alter_replica_log_dirs_request, describe_log_dirs_request,
};
use kafkit_protocol::{ErrorCode, Request};
use tokio::task::JoinSet;

use super::Client;
use super::cluster::LogDirDescription;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, error_for_each, in_order, missing};

/// One replica: a partition on a broker (Java `TopicPartitionReplica`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct TopicPartitionReplica {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The broker holding the replica.
    pub broker_id: i32,
}

impl TopicPartitionReplica {
    /// The replica of `topic`/`partition` on broker `broker_id`.
    pub fn new(topic: impl Into<String>, partition: i32, broker_id: i32) -> Self {
        TopicPartitionReplica {
            topic: topic.into(),
            partition,
            broker_id,
        }
    }
}

/// Where a replica lives on its broker (Java `ReplicaLogDirInfo`): its current log directory
/// and, while it moves (AlterReplicaLogDirs), the directory of its future replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaLogDirInfo {
    /// The log directory holding the replica; `None` when the broker has no such replica.
    pub current_replica_log_dir: Option<String>,
    /// How far the current replica is behind the partition's high watermark (offsets); 0
    /// without one.
    pub current_replica_offset_lag: i64,
    /// The log directory the replica is being moved to; `None` when it does not move.
    pub future_replica_log_dir: Option<String>,
    /// How far the future replica is behind the current one (offsets); 0 without one.
    pub future_replica_offset_lag: i64,
}

/// The replicas of `replicas`, grouped by broker (brokers in id order).
fn by_broker(replicas: &[TopicPartitionReplica]) -> BTreeMap<i32, Vec<&TopicPartitionReplica>> {
    let mut out: BTreeMap<i32, Vec<&TopicPartitionReplica>> = BTreeMap::new();
    for r in replicas {
        out.entry(r.broker_id).or_default().push(r);
    }
    out
}

/// The DescribeLogDirs request naming `replicas`' partitions (all on one broker).
pub(crate) fn describe_replicas_request(
    replicas: &[&TopicPartitionReplica],
) -> DescribeLogDirsRequest {
    let mut topics: Vec<describe_log_dirs_request::DescribableLogDirTopic> = Vec::new();
    for r in replicas {
        match topics.iter_mut().find(|t| t.topic == r.topic) {
            Some(t) => t.partitions.push(r.partition),
            None => topics.push(
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(r.topic.clone())
                    .with_partitions(vec![r.partition]),
            ),
        }
    }
    DescribeLogDirsRequest::default().with_topics(Some(topics))
}

/// Where each of `replicas` (all on one broker) lives, from that broker's log dirs. A replica
/// in no directory has no current directory (not an error, as in Java); a directory whose error
/// is `KAFKA_STORAGE_ERROR` is offline and skipped.
///
/// Errors: [`Error::Broker`] naming a directory's other error (the answer cannot be trusted).
pub(crate) fn replica_dirs_from(
    replicas: &[&TopicPartitionReplica],
    dirs: Vec<LogDirDescription>,
) -> Result<Vec<ReplicaLogDirInfo>> {
    let mut found: HashMap<(String, i32), ReplicaLogDirInfo> = replicas
        .iter()
        .map(|r| ((r.topic.clone(), r.partition), ReplicaLogDirInfo::default()))
        .collect();
    for dir in dirs {
        if dir.error_code == ErrorCode::KAFKA_STORAGE_ERROR {
            continue;
        }
        code_result("DescribeLogDirs", dir.error_code, Some(dir.path.clone()))?;
        for rep in dir.replicas {
            let Some(info) = found.get_mut(&(rep.topic, rep.partition)) else {
                continue;
            };
            if rep.is_future {
                info.future_replica_log_dir = Some(dir.path.clone());
                info.future_replica_offset_lag = rep.offset_lag;
            } else {
                info.current_replica_log_dir = Some(dir.path.clone());
                info.current_replica_offset_lag = rep.offset_lag;
            }
        }
    }
    Ok(replicas
        .iter()
        .map(|r| {
            found
                .get(&(r.topic.clone(), r.partition))
                .cloned()
                .unwrap_or_default()
        })
        .collect())
}

/// The AlterReplicaLogDirs request moving `moves` (all on one broker) to their directories.
pub(crate) fn alter_replica_dirs_request(
    moves: &[&(TopicPartitionReplica, String)],
) -> AlterReplicaLogDirsRequest {
    use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    let mut dirs: Vec<AlterReplicaLogDir> = Vec::new();
    for (r, path) in moves {
        let i = match dirs.iter().position(|d| &d.path == path) {
            Some(i) => i,
            None => {
                dirs.push(AlterReplicaLogDir::default().with_path(path.clone()));
                dirs.len() - 1
            }
        };
        let topics = &mut dirs[i].topics;
        match topics.iter_mut().find(|t| t.name == r.topic) {
            Some(t) => t.partitions.push(r.partition),
            None => topics.push(
                AlterReplicaLogDirTopic::default()
                    .with_name(r.topic.clone())
                    .with_partitions(vec![r.partition]),
            ),
        }
    }
    AlterReplicaLogDirsRequest::default().with_dirs(dirs)
}

/// Each move's result from its broker's AlterReplicaLogDirs answer: `Ok`, or its code
/// (`LOG_DIR_NOT_FOUND`, `REPLICA_NOT_AVAILABLE`, `KAFKA_STORAGE_ERROR`...); a partition the
/// answer lacks is [`Error::Protocol`].
pub(crate) fn alter_replica_dirs_results(
    moves: &[&(TopicPartitionReplica, String)],
    resp: AlterReplicaLogDirsResponse,
) -> Vec<ResourceResult<()>> {
    let mut codes: HashMap<(String, i32), ErrorCode> = HashMap::new();
    for t in resp.results {
        for p in t.partitions {
            codes.insert((t.topic_name.clone(), p.partition_index), p.error_code);
        }
    }
    moves
        .iter()
        .map(|(r, _)| match codes.get(&(r.topic.clone(), r.partition)) {
            Some(code) => code_result("AlterReplicaLogDirs", *code, None),
            None => Err(missing("AlterReplicaLogDirs", r)),
        })
        .collect()
}

/// Reads a broker's answer into one result per item of its request.
type AnswerMap<R, T> =
    fn(&[&R], <<R as PerBroker>::Req as Request>::Response) -> Vec<ResourceResult<T>>;

/// A replica moved to a log directory, keyed by the replica: what one broker is asked.
type DirMoves = Vec<(TopicPartitionReplica, (TopicPartitionReplica, String))>;

/// Sends one request per broker of `groups` concurrently (`make` builds it from the broker's
/// items, `map` reads the answer into one result per item), and puts the results in `keys`'
/// order. A broker's failure becomes each of its items' error.
async fn per_broker<K, R, T>(
    client: &Client,
    keys: Vec<K>,
    groups: BTreeMap<i32, Vec<(K, R)>>,
    make: fn(&[&R]) -> R::Req,
    map: AnswerMap<R, T>,
) -> Result<Vec<(K, ResourceResult<T>)>>
where
    K: Clone + Eq + std::hash::Hash + Send + std::fmt::Debug + 'static,
    R: PerBroker,
    T: Send + 'static,
{
    let mut tasks = JoinSet::new();
    for (broker, items) in groups {
        let client = client.clone();
        tasks.spawn(async move {
            let refs: Vec<&R> = items.iter().map(|(_, r)| r).collect();
            let req = make(&refs);
            let results = match client.transport().round_trip_to(broker, &req).await {
                Ok(resp) => map(&refs, resp),
                Err(e) => error_for_each(e, refs.len()).into_iter().map(Err).collect(),
            };
            items
                .into_iter()
                .map(|(k, _)| k)
                .zip(results)
                .collect::<Vec<_>>()
        });
    }
    let mut answers = Vec::with_capacity(keys.len());
    while let Some(joined) = tasks.join_next().await {
        answers.extend(joined.map_err(|e| {
            Error::Protocol(format!("{} task failed: {e}", R::Req::API_KEY.name()))
        })?);
    }
    Ok(in_order(R::Req::API_KEY.name(), keys, answers))
}

/// An item sent to its broker by [`per_broker`], and the request that carries it.
trait PerBroker: Send + Sync + 'static {
    type Req: Request + Send + Sync;
}

impl PerBroker for TopicPartitionReplica {
    type Req = DescribeLogDirsRequest;
}

impl PerBroker for (TopicPartitionReplica, String) {
    type Req = AlterReplicaLogDirsRequest;
}

impl Client {
    /// Describes where `replicas` live on their brokers (Java `Admin.describeReplicaLogDirs`,
    /// KIP-113): DescribeLogDirs naming their partitions, one request per broker, sent
    /// concurrently. A replica the broker does not hold has no current directory.
    ///
    /// Returns one result per replica, in order: its [`ReplicaLogDirInfo`], or its broker's
    /// error (unreachable, [`Error::UnsupportedVersion`] for DescribeLogDirs, a top-level or
    /// log-dir error).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a replica given twice.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_replica_log_dirs(
        &self,
        replicas: &[TopicPartitionReplica],
    ) -> Result<Vec<(TopicPartitionReplica, ResourceResult<ReplicaLogDirInfo>)>> {
        check_distinct("replica", replicas)?;
        let groups = by_broker(replicas)
            .into_iter()
            .map(|(b, rs)| (b, rs.into_iter().map(|r| (r.clone(), r.clone())).collect()))
            .collect();
        per_broker::<_, TopicPartitionReplica, _>(
            self,
            replicas.to_vec(),
            groups,
            describe_replicas_request,
            |refs, resp| match super::cluster::log_dirs_from(resp)
                .and_then(|dirs| replica_dirs_from(refs, dirs))
            {
                Ok(infos) => infos.into_iter().map(Ok).collect(),
                Err(e) => error_for_each(e, refs.len()).into_iter().map(Err).collect(),
            },
        )
        .await
    }

    /// Moves replicas between their brokers' log directories (Java
    /// `Admin.alterReplicaLogDirs`, KIP-113): AlterReplicaLogDirs to each replica's broker,
    /// concurrently, naming the absolute path of the directory each replica moves to. The broker
    /// copies the replica into a future replica there and swaps it in once caught up
    /// ([`Client::describe_replica_log_dirs`] shows the move); a replica not yet on the broker
    /// is created in that directory when it arrives.
    ///
    /// Returns one result per replica, in order: `Ok` when the move was accepted, or its code
    /// (`LOG_DIR_NOT_FOUND` for a path that is not one of the broker's log dirs,
    /// `KAFKA_STORAGE_ERROR` for an offline one...), or its broker's error.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a replica given twice.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have started moves.
    pub async fn alter_replica_log_dirs(
        &self,
        moves: &[(TopicPartitionReplica, String)],
    ) -> Result<Vec<(TopicPartitionReplica, ResourceResult<()>)>> {
        let keys: Vec<TopicPartitionReplica> = moves.iter().map(|(r, _)| r.clone()).collect();
        check_distinct("replica", &keys)?;
        let mut groups: BTreeMap<i32, DirMoves> = BTreeMap::new();
        for m in moves {
            groups
                .entry(m.0.broker_id)
                .or_default()
                .push((m.0.clone(), m.clone()));
        }
        per_broker::<_, (TopicPartitionReplica, String), _>(
            self,
            keys,
            groups,
            alter_replica_dirs_request,
            alter_replica_dirs_results,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::ReplicaInfo;
    use kafkit_protocol::Message;
    use kafkit_protocol::messages::alter_replica_log_dirs_response;

    fn dir(path: &str, code: ErrorCode, replicas: Vec<ReplicaInfo>) -> LogDirDescription {
        LogDirDescription {
            path: path.into(),
            error_code: code,
            replicas,
            total_bytes: None,
            usable_bytes: None,
            is_cordoned: false,
        }
    }

    fn replica(topic: &str, partition: i32, lag: i64, is_future: bool) -> ReplicaInfo {
        ReplicaInfo {
            topic: topic.into(),
            partition,
            size: 0,
            offset_lag: lag,
            is_future,
        }
    }

    #[test]
    fn describe_replicas_builds_and_maps() {
        let a = TopicPartitionReplica::new("t", 0, 1);
        let b = TopicPartitionReplica::new("t", 1, 1);
        let c = TopicPartitionReplica::new("u", 0, 1);
        let refs = [&a, &b, &c];
        let req = describe_replicas_request(&refs);
        let topics = req.topics.as_ref().expect("named topics");
        assert_eq!(topics.len(), 2);
        assert_eq!(topics[0].partitions, [0, 1]);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 4).expect("encodes");

        let dirs = vec![
            dir(
                "/d1",
                ErrorCode::NONE,
                vec![replica("t", 0, 0, false), replica("t", 1, 3, true)],
            ),
            dir("/d2", ErrorCode::NONE, vec![replica("t", 1, 0, false)]),
            dir(
                "/off",
                ErrorCode::KAFKA_STORAGE_ERROR,
                vec![replica("u", 0, 0, false)],
            ),
        ];
        let got = replica_dirs_from(&refs, dirs).expect("mapped");
        assert_eq!(got[0].current_replica_log_dir.as_deref(), Some("/d1"));
        assert_eq!(got[0].future_replica_log_dir, None);
        assert_eq!(got[1].current_replica_log_dir.as_deref(), Some("/d2"));
        assert_eq!(got[1].future_replica_log_dir.as_deref(), Some("/d1"));
        assert_eq!(got[1].future_replica_offset_lag, 3);
        assert_eq!(
            got[2],
            ReplicaLogDirInfo::default(),
            "only in the offline dir"
        );
        let bad = vec![dir("/d1", ErrorCode::UNKNOWN_SERVER_ERROR, vec![])];
        assert!(replica_dirs_from(&refs, bad).is_err());
        assert_eq!(
            by_broker(&[a.clone(), TopicPartitionReplica::new("t", 0, 2)]).len(),
            2
        );
    }

    #[test]
    fn alter_replica_dirs_builds_and_maps() {
        let m1 = (TopicPartitionReplica::new("t", 0, 1), "/d2".to_owned());
        let m2 = (TopicPartitionReplica::new("t", 1, 1), "/d2".to_owned());
        let m3 = (TopicPartitionReplica::new("u", 0, 1), "/d1".to_owned());
        let moves = [&m1, &m2, &m3];
        let req = alter_replica_dirs_request(&moves);
        assert_eq!(req.dirs.len(), 2);
        assert_eq!(req.dirs[0].path, "/d2");
        assert_eq!(req.dirs[0].topics[0].partitions, [0, 1]);
        assert_eq!(req.dirs[1].topics[0].name, "u");
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 2).expect("encodes");

        let p = |i, code| {
            alter_replica_log_dirs_response::AlterReplicaLogDirPartitionResult::default()
                .with_partition_index(i)
                .with_error_code(code)
        };
        let resp = AlterReplicaLogDirsResponse::default().with_results(vec![
            alter_replica_log_dirs_response::AlterReplicaLogDirTopicResult::default()
                .with_topic_name("t".into())
                .with_partitions(vec![
                    p(0, ErrorCode::NONE),
                    p(1, ErrorCode::LOG_DIR_NOT_FOUND),
                ]),
        ]);
        let got = alter_replica_dirs_results(&moves, resp);
        assert!(got[0].is_ok());
        assert_eq!(
            got[1].as_ref().unwrap_err().error_code(),
            Some(ErrorCode::LOG_DIR_NOT_FOUND)
        );
        assert!(matches!(got[2], Err(Error::Protocol(_))));
    }
}
