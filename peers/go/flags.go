package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// common holds the flags of both subcommands.
type common struct {
	client     string
	bootstrap  string
	topic      string
	partitions int
	records    int64
	valueSize  int
	tasks      int
	// set names the flags given on the command line: a setting that was not given keeps the
	// client's own default.
	set map[string]bool
}

func (c *common) brokers() []string { return strings.Split(c.bootstrap, ",") }

type produceOpts struct {
	common
	txnRecords         int64
	lingerMs           int
	batchSize          int
	batchMaxRecords    int
	maxInFlight        int
	bufferMemory       int64
	maxBufferedRecords int
	deliveryTimeoutMs  int
	compression        string
	acks               string
	idempotence        bool
}

type consumeOpts struct {
	common
	fetchMinBytes          int
	fetchMaxWaitMs         int
	maxPartitionFetchBytes int
	fetchMaxBytes          int
	queuedMaxKbytes        int
	checkCRCs              bool
}

// newFlags declares the flags both subcommands share. Every flag takes a value (`--name value`,
// booleans too) except --futures and --owned, which other peers use and this one ignores.
func newFlags(name string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.client, "client", "", "franz-go or kafka-go")
	fs.StringVar(&c.bootstrap, "bootstrap", "", "host:port[,host:port]")
	fs.StringVar(&c.topic, "topic", "", "the topic (exists already)")
	fs.IntVar(&c.partitions, "partitions", 0, "the topic's partitions")
	fs.Int64Var(&c.records, "records", 0, "records")
	fs.IntVar(&c.valueSize, "value-size", 100, "value bytes per record")
	fs.IntVar(&c.tasks, "tasks", 1, "senders at once")
	fs.Bool("futures", false, "ignored")
	fs.Bool("owned", false, "ignored")
	return fs
}

// boolFlag is a boolean that takes its value as the next argument (`--check-crcs true`), as the
// harness passes every boolean setting; Go's own bool flags only take `--name=value`.
type boolFlag struct{ v *bool }

func (b boolFlag) String() string {
	if b.v == nil {
		return "false"
	}
	return fmt.Sprint(*b.v)
}

func (b boolFlag) Set(s string) error {
	switch s {
	case "true":
		*b.v = true
	case "false":
		*b.v = false
	default:
		return fmt.Errorf("want true or false, not %q", s)
	}
	return nil
}

func parse(fs *flag.FlagSet, c *common, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	for _, name := range []string{"client", "bootstrap", "topic", "partitions", "records"} {
		if !c.set[name] {
			return fmt.Errorf("--%s is required", name)
		}
	}
	if c.client != "franz-go" && c.client != "kafka-go" {
		return fmt.Errorf("unknown --client %q (franz-go or kafka-go)", c.client)
	}
	if c.partitions <= 0 || c.records <= 0 || c.valueSize < 0 {
		return fmt.Errorf("--partitions and --records must be positive, --value-size not negative")
	}
	if c.tasks < 1 {
		return fmt.Errorf("--tasks must be at least 1")
	}
	return nil
}

func parseProduce(args []string) (produceOpts, error) {
	var o produceOpts
	fs := newFlags("produce", &o.common)
	fs.Int64Var(&o.txnRecords, "txn-records", 0, "records per transaction (0: no transactions)")
	fs.IntVar(&o.lingerMs, "linger-ms", 0, "linger")
	fs.IntVar(&o.batchSize, "batch-size", 0, "bytes per partition batch")
	fs.IntVar(&o.batchMaxRecords, "batch-max-records", 0, "records per partition batch")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 0, "requests in flight per connection")
	fs.Int64Var(&o.bufferMemory, "buffer-memory", 0, "bytes buffered")
	fs.IntVar(&o.maxBufferedRecords, "max-buffered-records", 0, "records buffered")
	fs.IntVar(&o.deliveryTimeoutMs, "delivery-timeout-ms", 0, "delivery timeout")
	fs.StringVar(&o.compression, "compression", "none", "none|lz4|zstd|snappy|gzip")
	fs.StringVar(&o.acks, "acks", "1", "1|all|0")
	fs.Var(boolFlag{&o.idempotence}, "idempotence", "true|false")
	if err := parse(fs, &o.common, args); err != nil {
		return o, err
	}
	switch o.acks {
	case "1", "all", "-1", "0":
	default:
		return o, fmt.Errorf("--acks %q: want 1, all or 0", o.acks)
	}
	switch o.compression {
	case "none", "lz4", "zstd", "snappy", "gzip":
	default:
		return o, fmt.Errorf("--compression %q: want none, lz4, zstd, snappy or gzip", o.compression)
	}
	if o.txnRecords < 0 {
		return o, fmt.Errorf("--txn-records must not be negative")
	}
	if o.txnRecords > 0 {
		// A transactional producer is idempotent and waits for every in-sync replica.
		o.acks, o.idempotence = "all", true
	}
	return o, nil
}

func parseConsume(args []string) (consumeOpts, error) {
	var o consumeOpts
	fs := newFlags("consume", &o.common)
	consumeFlags(fs, &o)
	err := parse(fs, &o.common, args)
	return o, err
}

// consumeFlags declares the consumer's fetch flags (the `consume` and `group` subcommands').
func consumeFlags(fs *flag.FlagSet, o *consumeOpts) {
	fs.IntVar(&o.fetchMinBytes, "fetch-min-bytes", 1, "fetch min bytes")
	fs.IntVar(&o.fetchMaxWaitMs, "fetch-max-wait-ms", 500, "fetch max wait")
	fs.IntVar(&o.maxPartitionFetchBytes, "max-partition-fetch-bytes", 1<<20, "bytes per partition per fetch")
	fs.IntVar(&o.fetchMaxBytes, "fetch-max-bytes", 50<<20, "bytes per fetch")
	fs.IntVar(&o.queuedMaxKbytes, "queued-max-kbytes", 0, "bytes queued in the client (KiB)")
	fs.Var(boolFlag{&o.checkCRCs}, "check-crcs", "true|false")
	fs.Int("rdkafka-queued-min-messages", 0, "librdkafka's: ignored")
	fs.Int("rdkafka-fetch-queue-backoff-ms", 0, "librdkafka's: ignored")
}

// ignored says once on stderr which of the given flags the client does not apply.
func (c *common) ignored(why string, names ...string) {
	var given []string
	for _, n := range names {
		if c.set[n] {
			given = append(given, "--"+n)
		}
	}
	if len(given) > 0 {
		note("%s: %s ignored (%s)", c.client, strings.Join(given, ", "), why)
	}
}
