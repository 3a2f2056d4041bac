//! `docs/protocol.md`, generated: every API with the versions the generated code has and the
//! ones this client sends (from [`crate::ops::versions`]), which part of the crate sends it (read
//! from the sources), and the KIPs behind the client's features ([`KIPS`]).
//!
//! Tests keep it true: the file must equal what [`render`] writes (`KAFKIT_BLESS=1 cargo test -p
//! kafkit --lib protocol_doc` rewrites it), and every KIP row must be backed by the code: each
//! version it needs is within the client's table, each API it needs is sent by some part of the
//! crate, and each test it names exists in the workspace.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kafkit_protocol::ApiKey;

use crate::ops::versions::client_max;

/// A client feature and the KIP behind it.
struct Kip {
    /// The KIP's number.
    number: u32,
    /// What kafkit does with it, one sentence.
    feature: &'static str,
    /// The request versions it needs from the client's table (`(API, lowest version)`).
    needs: &'static [(ApiKey, i16)],
    /// Test functions that show it (the name of an `fn` in the workspace).
    tests: &'static [&'static str],
}

/// The KIPs behind the client's features, in KIP order. A row claims only what its tests show.
const KIPS: &[Kip] = &[
    Kip {
        number: 4,
        feature: "Admin requests sent to the controller (CreateTopics, DeleteTopics, CreatePartitions), the rest to any broker or their coordinator",
        needs: &[(ApiKey::CreateTopics, 0), (ApiKey::DeleteTopics, 0)],
        tests: &["create_topics_goes_to_the_controller_and_metadata_is_cached"],
    },
    Kip {
        number: 35,
        feature: "ApiVersions on every new connection; each request at the highest version both sides speak, a typed error naming both ranges when none",
        needs: &[(ApiKey::ApiVersions, 0)],
        tests: &[
            "negotiates_versions_within_both_ranges",
            "api_versions_falls_back_when_the_broker_lacks_our_version",
            "no_common_version_is_a_typed_error_naming_both_ranges",
        ],
    },
    Kip {
        number: 43,
        feature: "SASL logins (PLAIN, SCRAM, OAUTHBEARER) with SaslHandshake and SaslAuthenticate",
        needs: &[(ApiKey::SaslHandshake, 0), (ApiKey::SaslAuthenticate, 0)],
        tests: &[
            "plain_logs_in_and_works_and_a_wrong_password_is_a_typed_failure",
            "handshake_v0_logs_in_and_the_broker_closes_it_when_its_session_expires",
        ],
    },
    Kip {
        number: 48,
        feature: "Delegation tokens: created, described, renewed and expired through the admin Client, and used to log in (SCRAM with the token)",
        needs: &[
            (ApiKey::CreateDelegationToken, 0),
            (ApiKey::DescribeDelegationToken, 0),
        ],
        tests: &["delegation_tokens_created_described_renewed_and_expired"],
    },
    Kip {
        number: 79,
        feature: "ListOffsets by timestamp: the first offset at or after a time",
        needs: &[(ApiKey::ListOffsets, 1)],
        tests: &["offsets_by_timestamp_find_the_first_record_at_or_after_the_time"],
    },
    Kip {
        number: 98,
        feature: "Idempotent and transactional producing: producer ids, sequences, transactions committed or aborted, read_committed reading",
        needs: &[
            (ApiKey::InitProducerId, 0),
            (ApiKey::AddPartitionsToTxn, 0),
            (ApiKey::EndTxn, 0),
        ],
        tests: &[
            "a_resent_idempotent_batch_is_stored_once",
            "commits_and_an_abort_write_markers_and_read_committed_reads_the_commits",
            "a_second_writer_of_the_same_id_fences_the_first",
        ],
    },
    Kip {
        number: 107,
        feature: "DeleteRecords: the log start moved up to an offset",
        needs: &[(ApiKey::DeleteRecords, 0)],
        tests: &["list_offsets_and_delete_records"],
    },
    Kip {
        number: 110,
        feature: "zstd record batches, read and written",
        needs: &[(ApiKey::Produce, 7), (ApiKey::Fetch, 10)],
        tests: &["zstd_ours_to_librdkafka", "zstd_librdkafka_to_ours"],
    },
    Kip {
        number: 113,
        feature: "A replica moved between a broker's log dirs (AlterReplicaLogDirs) and each replica's current and future dir read back (DescribeLogDirs)",
        needs: &[
            (ApiKey::AlterReplicaLogDirs, 1),
            (ApiKey::DescribeLogDirs, 1),
        ],
        tests: &["a_replica_moves_to_the_other_log_dir"],
    },
    Kip {
        number: 219,
        feature: "Client-side throttling: a throttled broker's next request waits out its throttle time",
        needs: &[],
        tests: &["throttle_holds_back_the_next_request_to_that_broker_only"],
    },
    Kip {
        number: 227,
        feature: "Incremental fetch sessions, one per broker, given up and restarted on session errors",
        needs: &[(ApiKey::Fetch, 7)],
        tests: &[
            "an_unassigned_partition_is_forgotten_by_the_session",
            "closing_the_reader_closes_its_fetch_session",
            "a_fetch_session_the_broker_lost_is_replaced",
        ],
    },
    Kip {
        number: 255,
        feature: "SASL/OAUTHBEARER logins with the token's lifetime bounding the session",
        needs: &[(ApiKey::SaslAuthenticate, 1)],
        tests: &["oauthbearer_logs_in_and_the_token_expiry_bounds_the_session"],
    },
    Kip {
        number: 320,
        feature: "Log truncation detected from leader epochs (OffsetForLeaderEpoch), committed offsets carry their leader epoch",
        needs: &[(ApiKey::Fetch, 10), (ApiKey::OffsetForLeaderEpoch, 3)],
        tests: &[
            "a_truncated_log_is_detected_from_the_leader_epoch",
            "auto_commit_with_leader_epochs_read_back_stable_and_explicit_offsets",
        ],
    },
    Kip {
        number: 339,
        feature: "IncrementalAlterConfigs: set, delete, append and subtract, validate only",
        needs: &[(ApiKey::IncrementalAlterConfigs, 0)],
        tests: &["incremental_alter_configs_validate_only_then_each_op_read_back"],
    },
    Kip {
        number: 345,
        feature: "Static group membership (`group_instance_id`): a restart within the session keeps the assignment, a newer member fences the older; the admin Client removes static members by instance id (LeaveGroup 3+, `remove_members_from_consumer_group`)",
        needs: &[(ApiKey::JoinGroup, 5), (ApiKey::LeaveGroup, 3)],
        tests: &[
            "a_newer_static_member_fences_the_older_one",
            "static_member_restart_within_the_session_is_taken_back_and_resumes_at_its_commits",
            "remove_members_from_consumer_group_removes_a_static_member",
        ],
    },
    Kip {
        number: 360,
        feature: "An idempotent or transactional producer bumps its epoch instead of dying on a sequence error or a lost answer",
        needs: &[(ApiKey::InitProducerId, 3)],
        tests: &[
            "a_sequence_error_is_abortable_and_the_abort_bumps_the_epoch",
            "lost_answers_to_appended_batches_lose_and_duplicate_nothing",
        ],
    },
    Kip {
        number: 368,
        feature: "SASL re-authentication before the broker's session ends, on a busy connection",
        needs: &[(ApiKey::SaslAuthenticate, 1)],
        tests: &[
            "reauthentication_keeps_a_busy_connection_past_its_session",
            "reauthentication_more_often_than_once_a_second_is_refused_and_closes_the_connection",
        ],
    },
    Kip {
        number: 392,
        feature: "Fetching from the closest replica (`client_rack`, the preferred read replica)",
        needs: &[(ApiKey::Fetch, 11)],
        tests: &["preferred_read_replica_is_used"],
    },
    Kip {
        number: 429,
        feature: "Cooperative (incremental) rebalancing: members revoke only what moves",
        needs: &[(ApiKey::JoinGroup, 0), (ApiKey::SyncGroup, 0)],
        tests: &[
            "cooperative_members_revoke_only_what_moves",
            "cooperative_sticky_members_of_ours_and_java_split_and_converge",
        ],
    },
    Kip {
        number: 447,
        feature: "Consume-transform-produce: offsets committed in the transaction with the group's generation and member",
        needs: &[(ApiKey::TxnOffsetCommit, 3), (ApiKey::AddOffsetsToTxn, 0)],
        tests: &[
            "every_input_record_is_output_exactly_once_across_a_kill_and_a_rebalance",
            "a_member_waits_for_a_pending_transactional_commit_of_its_group",
        ],
    },
    Kip {
        number: 500,
        feature: "UnregisterBroker through the admin Client (`unregister_broker`), its controller errors typed (BROKER_ID_NOT_REGISTERED)",
        needs: &[(ApiKey::UnregisterBroker, 0)],
        tests: &["unregister_broker_and_raft_voter_changes_answer_typed_errors"],
    },
    Kip {
        number: 516,
        feature: "Topic ids: the Writer's Produce 13 names topics by id (from metadata), UNKNOWN_TOPIC_ID refreshes metadata and resends by the new id",
        needs: &[(ApiKey::Produce, 13), (ApiKey::Metadata, 10)],
        tests: &[
            "a_plain_produce_goes_at_v13_by_topic_id",
            "a_topic_created_again_under_its_name_is_written_by_its_new_id",
        ],
    },
    Kip {
        number: 554,
        feature: "SCRAM credentials managed through the Admin API (AlterUserScramCredentials)",
        needs: &[(ApiKey::AlterUserScramCredentials, 0)],
        tests: &["scram_sha256_and_sha512_log_in_and_work"],
    },
    Kip {
        number: 580,
        feature: "Exponential backoff with jitter for retries (`retry_backoff`, `retry_backoff_max`)",
        needs: &[],
        tests: &["retries_back_off_exponentially"],
    },
    Kip {
        number: 584,
        feature: "Feature versions: UpdateFeatures (validate only), finalized features read from ApiVersions",
        needs: &[(ApiKey::UpdateFeatures, 0), (ApiKey::ApiVersions, 3)],
        tests: &["update_features_validate_only_refuses_a_downgrade_and_changes_nothing"],
    },
    Kip {
        number: 595,
        feature: "DescribeQuorum: the KRaft quorum's leader, voters and observers with their lag",
        needs: &[(ApiKey::DescribeQuorum, 0)],
        tests: &["describe_quorum_shows_the_one_voter"],
    },
    Kip {
        number: 618,
        feature: "Fencing producers from the admin Client (`fence_producers`, `kafkit transactions fence`): InitProducerId with no producer id at each id's transaction coordinator; the fenced transactional Writer's next call fails fatal",
        needs: &[(ApiKey::InitProducerId, 0), (ApiKey::FindCoordinator, 1)],
        tests: &[
            "fence_producers_fences_our_transactional_writer",
            "transactions_commands_on_kafka",
        ],
    },
    Kip {
        number: 664,
        feature: "Hanging transactions: producers per partition (DescribeProducers), transactions described and listed, an open transaction aborted with WriteTxnMarkers at the partition's leader (`abort_transaction`, `kafkit transactions abort`)",
        needs: &[
            (ApiKey::DescribeProducers, 0),
            (ApiKey::DescribeTransactions, 0),
            (ApiKey::ListTransactions, 0),
            (ApiKey::WriteTxnMarkers, 1),
        ],
        tests: &[
            "abort_transaction_aborts_a_hanging_transaction",
            "transactions_commands_on_kafka",
        ],
    },
    Kip {
        number: 848,
        feature: "The consumer group protocol: ConsumerGroupHeartbeat, the broker's assignors, regex subscriptions resolved by the broker (an invalid one typed), offsets committed and fetched by topic id, `GroupProtocol::Auto` (the consumer protocol where the coordinator offers it, classic elsewhere)",
        needs: &[
            (ApiKey::ConsumerGroupHeartbeat, 0),
            (ApiKey::OffsetCommit, 10),
            (ApiKey::OffsetFetch, 10),
        ],
        tests: &[
            "kip848_members_use_the_brokers_uniform_and_range_assignors",
            "kip848_regex_subscription_is_resolved_by_the_broker",
            "kip848_an_invalid_regex_is_a_typed_error",
            "kip848_commits_and_offset_fetches_name_topics_by_id",
            "kip848_a_commit_refused_unknown_topic_id_is_sent_again_by_name",
            "group_protocol_auto_picks_what_the_coordinator_offers",
            "kip848_members_of_ours_and_java_split_and_converge",
        ],
    },
    Kip {
        number: 853,
        feature: "KRaft voter changes through the admin Client (`add_raft_voter`, `remove_raft_voter`); a static quorum's refusal (UNSUPPORTED_VERSION) typed",
        needs: &[(ApiKey::AddRaftVoter, 0), (ApiKey::RemoveRaftVoter, 0)],
        tests: &["unregister_broker_and_raft_voter_changes_answer_typed_errors"],
    },
    Kip {
        number: 890,
        feature: "Transactions v2 when the broker finalizes `transaction.version` 2: no AddPartitionsToTxn or AddOffsetsToTxn, the epoch bumped by every EndTxn, TRANSACTION_ABORTABLE aborts and goes on; the flow chosen again for every transaction",
        needs: &[
            (ApiKey::Produce, 12),
            (ApiKey::TxnOffsetCommit, 5),
            (ApiKey::EndTxn, 5),
        ],
        tests: &[
            "transactions_v2_on_the_wire",
            "the_flow_follows_transaction_version_per_transaction",
            "transaction_abortable_is_aborted_and_the_writer_goes_on",
        ],
    },
    Kip {
        number: 899,
        feature: "Rebootstrap (`metadata_recovery_strategy`, default `Rebootstrap`): when every known broker is unreachable the client asks the bootstrap addresses again; `None` keeps the old behaviour",
        needs: &[(ApiKey::Metadata, 0)],
        tests: &[
            "all_known_brokers_unreachable_rebootstraps",
            "all_known_brokers_unreachable_without_rebootstrap_fails",
            "bootstrap_address_moved_to_another_cluster",
        ],
    },
    Kip {
        number: 932,
        feature: "Share groups, admin side: listed by type, described (ShareGroupDescribe), their offsets listed with lag, altered and deleted (a share consumer is not written yet)",
        needs: &[(ApiKey::ShareGroupDescribe, 1), (ApiKey::ListGroups, 5)],
        tests: &["share_group_listed_and_described"],
    },
    Kip {
        number: 951,
        feature: "Leader hints in Produce and Fetch answers move the client to the new leader without a metadata round trip",
        needs: &[(ApiKey::Produce, 10), (ApiKey::Fetch, 16)],
        tests: &["a_kip951_leader_hint_moves_the_reader_without_metadata"],
    },
    Kip {
        number: 1023,
        feature: "ListOffsets by the earliest offset pending upload to tiered storage, beside the earliest local and latest tiered offsets (`OffsetSpec`)",
        needs: &[(ApiKey::ListOffsets, 11)],
        tests: &["list_offsets_v11_answers_the_tiered_storage_specs"],
    },
    Kip {
        number: 1050,
        feature: "Error categories: every error says whether it is retriable, refresh-retriable, transaction-abortable, application-recoverable or fatal (`ErrorCategory`, from Kafka's error table)",
        needs: &[],
        tests: &[
            "every_code_of_the_table_has_its_kip_1050_category",
            "client_errors_have_a_category_too",
        ],
    },
    Kip {
        number: 1066,
        feature: "DescribeLogDirs 5 says whether a log directory is cordoned",
        needs: &[(ApiKey::DescribeLogDirs, 5)],
        tests: &["describe_log_dirs_v5_says_the_dir_is_not_cordoned"],
    },
    Kip {
        number: 1073,
        feature: "DescribeCluster 2 lists fenced brokers on request (`DescribeClusterOptions::include_fenced_brokers`)",
        needs: &[(ApiKey::DescribeCluster, 2)],
        tests: &[
            "describe_cluster_v2_with_fenced_brokers",
            "a_killed_node_is_listed_as_fenced",
        ],
    },
    Kip {
        number: 1082,
        feature: "A consumer-protocol member generates its own member id and sends it in its first heartbeat",
        needs: &[(ApiKey::ConsumerGroupHeartbeat, 1)],
        tests: &["kip848_commits_and_offset_fetches_name_topics_by_id"],
    },
    Kip {
        number: 1092,
        feature: "`GroupReader::close_with`: leave the group, remain in it, or the default for the member's kind (static or dynamic, classic or consumer protocol)",
        needs: &[(ApiKey::LeaveGroup, 0), (ApiKey::ConsumerGroupHeartbeat, 0)],
        tests: &["close_options_leave_the_group_or_remain_in_it"],
    },
    Kip {
        number: 1102,
        feature: "Metadata 13's REBOOTSTRAP_REQUIRED and `metadata_recovery_rebootstrap_trigger`: rebootstrap when told to or when no metadata came for that long",
        needs: &[(ApiKey::Metadata, 13)],
        tests: &[
            "metadata_rebootstrap_required_decision",
            "metadata_rebootstrap_required_on_kafka",
            "rebootstrap_settings_and_trigger",
        ],
    },
    Kip {
        number: 1142,
        feature: "ListConfigResources: every config resource of the asked types (client metrics, groups, topics, brokers)",
        needs: &[(ApiKey::ListConfigResources, 1)],
        tests: &["list_config_resources_lists_typed_resources"],
    },
    Kip {
        number: 1152,
        feature: "ListTransactions 2 filters by a transactional id pattern",
        needs: &[(ApiKey::ListTransactions, 2)],
        tests: &["list_transactions_by_transactional_id_pattern"],
    },
    Kip {
        number: 1242,
        feature: "ApiVersions 5 names the cluster and node a connection was dialled for; a misrouted connection, refused by the broker, makes the client rebootstrap",
        needs: &[(ApiKey::ApiVersions, 5)],
        tests: &[
            "a_refused_api_versions_is_rebootstrap_required",
            "api_versions_v5_names_the_cluster_and_node",
            "broker_replaced_behind_the_same_address",
            "bootstrap_address_moved_to_another_cluster",
        ],
    },
    Kip {
        number: 1319,
        feature: "TxnOffsetCommit 6 names topics by id when the Writer's metadata has every id; a stale id is abortable and refreshes the metadata",
        needs: &[(ApiKey::TxnOffsetCommit, 6)],
        tests: &["txn_offset_commit_by_a_stale_topic_id_is_abortable_then_names_the_new_one"],
    },
];

/// The workspace's root (two levels above this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n != "target" && n != "generated")
            {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `text` up to its unit-test module: what the library itself does.
fn library_part(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// Whether `text` names `word` as a whole identifier.
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let before = text[..at].chars().next_back().is_none_or(|c| !ident(c));
        let after = text[at + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !ident(c));
        before && after
    })
}

/// Which parts of `crates/kafkit/src` send each API: the first folder (or file) of every
/// library source that names its request type or calls its `ops` builder (`<api>_request`).
/// Routing tables are left out (they name every API a caller may send through
/// `Transport::round_trip`); `routed` says whether they name it. `ops/` is left out too: it
/// builds and reads requests but sends none, so the parts that call it are the senders.
struct Usage {
    users: Vec<(ApiKey, BTreeSet<String>)>,
    routed: BTreeSet<ApiKey>,
}

fn usage() -> Usage {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut users: Vec<(ApiKey, BTreeSet<String>)> =
        ApiKey::ALL.iter().map(|k| (*k, BTreeSet::new())).collect();
    let mut routed = BTreeSet::new();
    // The `<api>_request` builders `ops/` defines: a call to one names its API.
    let ops_text: String = files
        .iter()
        .filter(|f| f.strip_prefix(&src).is_ok_and(|r| r.starts_with("ops")))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let builders: Vec<Option<String>> = users
        .iter()
        .map(|(api, _)| {
            let builder = format!("{}_request", snake_case(api.name()));
            let defined = ["(", "<"]
                .iter()
                .any(|open| ops_text.contains(&format!("fn {builder}{open}")));
            defined.then_some(builder)
        })
        .collect();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap_or(&file);
        let rel_s = rel.to_string_lossy().replace('\\', "/");
        if rel_s.starts_with("ops/") || rel_s == "conn/protocol_doc.rs" {
            continue;
        }
        let is_route = rel_s == "transport/route.rs"
            || rel_s == "transport/split.rs"
            || rel_s.starts_with("transport/split/");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let text = library_part(&text);
        let part = rel_s
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        for ((api, set), builder) in users.iter_mut().zip(&builders) {
            let calls_builder = builder.as_ref().is_some_and(|b| names(text, b));
            if names(text, &format!("{}Request", api.name())) || calls_builder {
                if is_route {
                    routed.insert(*api);
                } else {
                    set.insert(part.clone());
                }
            }
        }
    }
    Usage { users, routed }
}

/// `CreateTopics` as `create_topics`: the name of an API's `ops` builder before `_request`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Every `fn` name in the workspace's Rust sources (tests, crates, xtask).
fn workspace_fns() -> BTreeSet<String> {
    let root = root();
    let mut files = Vec::new();
    for dir in ["tests", "crates", "xtask"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut fns = BTreeSet::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (at, _) in text.match_indices("fn ") {
            let name: String = text[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                fns.insert(name);
            }
        }
    }
    fns
}

fn range(min: i16, max: i16) -> String {
    if min == max {
        min.to_string()
    } else {
        format!("{min}-{max}")
    }
}

/// The head of docs/protocol.md, down to the APIs table's header row.
const HEAD: &str = "<!-- Generated by `KAFKIT_BLESS=1 cargo test -p kafkit --lib protocol_doc` from \
         crates/kafkit/src/ops/versions.rs, conn/protocol_doc.rs and the sources; do not edit. -->\n\
         # The Kafka protocol in kafkit\n\n\
         `kafkit-protocol` is generated from Apache Kafka 4.4's message schemas, with the older \
         versions 4.x dropped kept from the schemas of October 2024 \
         ([protocol-codegen.md](protocol-codegen.md)). The client sends each API at the highest \
         version both it and the broker speak, never above its own table \
         (`crates/kafkit/src/ops/versions.rs`): a version is raised there only together with \
         the code that fills in what it adds.\n\n\
         Columns: **Kafka 4.4** is every version the generated code encodes and decodes \
         (*unstable* marks versions above the schema's latest stable one, never sent); \
         **kafkit sends** is the highest version the client sends (it negotiates the highest version both sides speak up to it; an API whose older versions the client cannot fill in, such as Produce below 3, refuses a broker that offers only those with a typed error); **sent by** is the part of the \
         `kafkit` crate whose code builds the request (read from the sources when this file is \
         written), *round_trip* an API the transport routes but only a caller's \
         `Transport::round_trip` sends, *-* a broker-internal API.\n\n\
         ## APIs\n\n\
         | Key | API | Kafka 4.4 | kafkit sends up to | Sent by |\n\
         |---:|---|---|---|---|\n";

/// The KIPs section's introduction and table header.
const KIPS_HEAD: &str = "\n## KIPs behind the client's features\n\n\
         Each row is checked by a test (`conn::protocol_doc`): the versions it needs are within \
         the client's table, the APIs it needs are sent by the crate, and the tests it names \
         exist.\n\n\
         | KIP | What kafkit does | Needs | Tests |\n\
         |---|---|---|---|\n";

/// docs/protocol.md.
fn render(usage: &Usage) -> String {
    let mut s = String::from(HEAD);
    for (api, users) in &usage.users {
        let _ = writeln!(s, "{}", api_row(*api, users, usage));
    }
    s.push_str(KIPS_HEAD);
    for k in KIPS {
        let _ = writeln!(s, "{}", kip_row(k));
    }
    s
}

/// One row of the APIs table: key, name, the generated versions, the highest version sent,
/// and who sends it.
fn api_row(api: ApiKey, users: &BTreeSet<String>, usage: &Usage) -> String {
    let valid = api.valid_versions();
    let stable = api.latest_stable_version();
    let mut generated = range(valid.min, valid.max);
    if stable < valid.max {
        let _ = write!(generated, " (unstable: {})", range(stable + 1, valid.max));
    }
    let max = client_max(api).unwrap_or(stable);
    let by = if !users.is_empty() {
        users.iter().cloned().collect::<Vec<_>>().join(", ")
    } else if usage.routed.contains(&api) {
        "*round_trip*".to_owned()
    } else {
        "*-*".to_owned()
    };
    let sends = if users.is_empty() && !usage.routed.contains(&api) {
        "-".to_owned()
    } else {
        max.to_string()
    };
    format!(
        "| {} | {} | {} | {} | {} |",
        api as i16,
        api.name(),
        generated,
        sends,
        by
    )
}

/// One row of the KIPs table: the KIP, its feature, the versions it needs, its tests.
fn kip_row(k: &Kip) -> String {
    let needs = if k.needs.is_empty() {
        "-".to_owned()
    } else {
        k.needs
            .iter()
            .map(|(api, v)| format!("{} {}+", api.name(), v))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let tests = k
        .tests
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "| [KIP-{n}](https://cwiki.apache.org/confluence/display/KAFKA/KIP-{n}) | {} | {} | {} |",
        k.feature,
        needs,
        tests,
        n = k.number
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/protocol.md is what [`render`] writes today (`KAFKIT_BLESS=1` rewrites it).
    #[test]
    fn protocol_doc_is_current() {
        let path = root().join("docs/protocol.md");
        let want = render(&usage());
        if std::env::var_os("KAFKIT_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write docs/protocol.md");
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/protocol.md is stale: run `KAFKIT_BLESS=1 cargo test -p kafkit --lib protocol_doc`"
        );
    }

    /// Every KIP row is backed by the code: its versions within the client's table, its APIs
    /// sent by the crate, its tests present.
    #[test]
    fn protocol_doc_kip_rows_claim_only_what_the_code_does() {
        let usage = usage();
        let fns = workspace_fns();
        let mut numbers: Vec<u32> = KIPS.iter().map(|k| k.number).collect();
        let sorted = {
            let mut v = numbers.clone();
            v.sort_unstable();
            v.dedup();
            v
        };
        assert_eq!(numbers, sorted, "KIP rows in order, once each");
        numbers.clear();
        for k in KIPS {
            assert!(!k.tests.is_empty(), "KIP-{}: names no test", k.number);
            for (api, v) in k.needs {
                let max = client_max(*api).expect("every API is in the table");
                assert!(
                    max >= *v,
                    "KIP-{} needs {api} {v}, the client sends at most {max}",
                    k.number
                );
                let users = &usage
                    .users
                    .iter()
                    .find(|(a, _)| a == api)
                    .expect("every API")
                    .1;
                assert!(
                    !users.is_empty(),
                    "KIP-{} needs {api}, which no part of the crate sends",
                    k.number
                );
            }
            for t in k.tests {
                assert!(fns.contains(*t), "KIP-{}: no test `fn {t}`", k.number);
            }
        }
    }

    /// The checks themselves can fail: a row needing more than the table, or a missing test.
    #[test]
    fn protocol_doc_checks_catch_false_claims() {
        let fns = workspace_fns();
        assert!(!fns.contains("no_such_test_anywhere_in_the_workspace"));
        assert!(fns.contains("protocol_doc_checks_catch_false_claims"));
        let produce = client_max(ApiKey::Produce).unwrap();
        assert!(produce < ApiKey::Produce.valid_versions().max + 1);
        let usage = usage();
        let sent = |api: ApiKey| {
            !usage
                .users
                .iter()
                .find(|(a, _)| *a == api)
                .unwrap()
                .1
                .is_empty()
        };
        assert!(sent(ApiKey::Produce) && sent(ApiKey::Fetch));
        assert!(!sent(ApiKey::LeaderAndIsr) && !usage.routed.contains(&ApiKey::LeaderAndIsr));
        assert!(names("m::ProduceRequest::default()", "ProduceRequest"));
        assert!(!names("TxnProduceRequestX", "ProduceRequest"));
    }
}
