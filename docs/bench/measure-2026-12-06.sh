#!/bin/bash
# The cross-client measurement of 2026-12-06 (issue 38), from the repository root, after
# `cargo build --release -p kafkit-bench`, `cargo xtask broker --port 29601 start --kafka` and
# `cargo xtask java-peer` / `go-peer` / `krafka-peer`. Env: K (bootstrap), J (results file),
# KAFKIT_JAVA_PEER_CP, KAFKIT_GO_PEER, KAFKIT_KRAFKA_PEER, KAFKIT_BENCH_COMMIT.
set -u
B=target/release/kafkit-bench
CL=${CL:-ours,rdkafka,krafka,franz-go,kafka-go,java}
R=${R:-3}
# The broker warms up first (a fresh JVM): one untimed run of two clients, not recorded.
$B producer --cases kafka --kafka $K --kafka-partitions 48 --records 1000000 --clients ours,rdkafka > /dev/null 2>&1
P="$B producer --cases kafka --kafka $K --clients $CL --json $J"
$P --kafka-partitions 48 --records 1000000 --repeat $R                                > /tmp/m-p48.md
$P --kafka-partitions 48 --records 1000000 --repeat $R --acks all --idempotence true  > /tmp/m-p48-idem.md
$P --kafka-partitions 48 --records 1000000 --repeat 2 --compression lz4              > /tmp/m-p48-lz4.md
$P --kafka-partitions 48 --records 1000000 --repeat 2 --compression zstd             > /tmp/m-p48-zstd.md
$P --kafka-partitions 1000 --records 300000 --repeat 2                                > /tmp/m-p1000.md
$P --kafka-partitions 1000 --records 300000 --repeat 2 --acks all --idempotence true  > /tmp/m-p1000-idem.md
$B producer --cases kafka-txn --kafka $K --clients $CL --json $J --partitions 48 --records 500000 --txn-records 10000 --repeat 2 > /tmp/m-txn.md
C="$B consumer --cases kafka --kafka $K --clients $CL --json $J"
$C --partitions 6,48 --records 1000000 --repeat $R                                    > /tmp/m-c.md
$C --partitions 1000 --records 300000 --repeat 2                                      > /tmp/m-c1000.md
$B consumer --cases kafka --kafka $K --clients ours,rdkafka --group --partitions 48 --records 1000000 --repeat 2 > /tmp/m-group.md
echo done
# The run of 2026-12-06 was cut after the 48-partition producer cases (the shell that ran it was
# restarted); the rest ran from the 1,000-partition producer cases on, against a fresh broker
# started the same way and warmed up the same way; the one kafka-go consumer run at 1,000
# partitions that hung in kafka-go's Reader.Close (after its window) was run again alone:
#   kafkit-bench consumer --cases kafka --kafka $K --clients kafka-go --json $J --partitions 1000 --records 300000 --repeat 1
# The group rows in the results are from a later run with 5,000,000 records (1,000,000 are read in
# about a second on Kafka, too short for the leave to fall inside the read):
# (those first 4 group rows were replaced by 18 from 16:32-16:34 UTC, main at 4c43c59, every client
# with a group program of its own, after the Reader's fetch-session fix of 9d8df2e; through xtask,
# which builds the peers, against a broker started with `cargo xtask broker --port 19492 start --kafka`):
#   cargo xtask bench consumer --cases kafka --kafka $K --clients ours,rdkafka,krafka,franz-go,kafka-go,java --group --partitions 48 --records 5000000 --repeat 3 --json $J
# The cluster case (18 rows, 16:46-16:47 UTC, main at a9e6821), against three nodes started with
# `cargo xtask broker --port 19600 start --kafka --brokers 3` (after a first set of 2 runs per
# client on the fresh cluster, not kept, as its warm-up):
#   cargo xtask bench producer --cases kafka --kafka 127.0.0.1:19600,127.0.0.1:19601,127.0.0.1:19602 --kafka-partitions 48 --replication-factor 3 --acks all --idempotence true --clients ours,rdkafka,krafka,franz-go,kafka-go,java --records 1000000 --repeat 3 --json $J
