package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// requestCounter counts the Produce (key 0) and Fetch (key 1) requests franz-go writes, over
// every broker, retries included.
type requestCounter struct{ produce, fetch atomic.Int64 }

var _ kgo.HookBrokerWrite = (*requestCounter)(nil)

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	switch key {
	case 0:
		c.produce.Add(1)
	case 1:
		c.fetch.Add(1)
	}
}

func franzCodec(name string) kgo.CompressionCodec {
	switch name {
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "gzip":
		return kgo.GzipCompression()
	}
	return kgo.NoCompression()
}

// franzProducerOpts maps the bench's producer settings onto franz-go's options; a setting not
// given keeps franz-go's default.
func franzProducerOpts(o produceOpts, hooks *requestCounter) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers()...),
		kgo.DefaultProduceTopic(o.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(franzCodec(o.compression)),
		kgo.WithHooks(hooks),
	}
	switch o.acks {
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if o.txnRecords > 0 {
		opts = append(opts, kgo.TransactionalID("bench-"+o.topic))
	}
	if o.idempotence {
		// franz-go fixes the requests in flight of an idempotent producer (5 per broker on
		// Kafka 1.0+) and refuses MaxProduceRequestsInflightPerBroker with idempotence.
		if o.set["max-in-flight"] && o.maxInFlight != 5 {
			note("franz-go: --max-in-flight %d ignored: an idempotent producer keeps up to 5 Produce requests in flight per broker", o.maxInFlight)
		}
	} else {
		opts = append(opts, kgo.DisableIdempotentWrite())
		if o.set["max-in-flight"] && o.maxInFlight > 0 {
			opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(o.maxInFlight))
		}
	}
	if o.set["linger-ms"] {
		opts = append(opts, kgo.ProducerLinger(time.Duration(o.lingerMs)*time.Millisecond))
	}
	if o.set["batch-size"] && o.batchSize > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(o.batchSize)))
	}
	if o.set["buffer-memory"] && o.bufferMemory > 0 {
		opts = append(opts, kgo.MaxBufferedBytes(int(o.bufferMemory)))
	}
	if o.set["max-buffered-records"] && o.maxBufferedRecords > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(o.maxBufferedRecords))
	}
	if o.set["delivery-timeout-ms"] && o.deliveryTimeoutMs > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(time.Duration(o.deliveryTimeoutMs)*time.Millisecond))
	}
	o.ignored("franz-go caps a batch by bytes only", "batch-max-records")
	return opts
}

func franzProduce(o produceOpts) (result, error) {
	if o.idempotence && o.acks != "all" && o.acks != "-1" {
		return result{}, errors.New("franz-go: --idempotence true needs --acks all")
	}
	hooks := new(requestCounter)
	cl, err := kgo.NewClient(franzProducerOpts(o, hooks)...)
	if err != nil {
		return result{}, fmt.Errorf("franz-go: %w", err)
	}
	defer cl.Close()
	ctx := context.Background()
	if o.txnRecords > 0 {
		// The producer id, as the Java client's initTransactions, before the window.
		if _, _, err := cl.ProducerID(ctx); err != nil {
			return result{}, fmt.Errorf("franz-go: init the transactional producer: %w", err)
		}
	}

	var (
		delivered, failed atomic.Int64
		first             firstError
	)
	value := recordValue(o.valueSize)
	done := func(r *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			first.set("partition %d: %v", r.Partition, err)
			return
		}
		delivered.Add(1)
	}
	// send produces records [from, to): with --tasks N, N goroutines take every N-th record.
	send := func(from, to int64) {
		var wg sync.WaitGroup
		for t := range int64(o.tasks) {
			wg.Go(func() {
				for i := from + t; i < to; i += int64(o.tasks) {
					rec := &kgo.Record{Partition: int32(i % int64(o.partitions)), Value: value}
					cl.Produce(ctx, rec, done)
				}
			})
		}
		wg.Wait()
	}

	w := startWindow()
	if o.txnRecords == 0 {
		send(0, o.records)
		if err := cl.Flush(ctx); err != nil {
			first.set("flush: %v", err)
		}
	} else {
		for from := int64(0); from < o.records; from += o.txnRecords {
			to := min(from+o.txnRecords, o.records)
			if err := franzTransaction(ctx, cl, func() { send(from, to) }); err != nil {
				first.set("transaction of records %d..%d: %v", from, to, err)
				break
			}
		}
	}
	res := result{requests: hooks.produce.Load(), version: moduleVersion("franz-go")}
	res.wall, res.cpu = w.end()
	res.delivered = delivered.Load()
	// Records never sent (a transaction that failed stops the run) count as failed.
	res.failed = o.records - res.delivered
	res.err = first.get()
	return res, nil
}

// franzTransaction runs one transaction: begin, send, flush (every record acknowledged), commit.
func franzTransaction(ctx context.Context, cl *kgo.Client, send func()) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	send()
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func franzConsume(o consumeOpts) (result, error) {
	hooks := new(requestCounter)
	parts := make(map[int32]kgo.Offset, o.partitions)
	for p := range o.partitions {
		parts[int32(p)] = kgo.NewOffset().At(0)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers()...),
		kgo.WithHooks(hooks),
		kgo.FetchMinBytes(int32(o.fetchMinBytes)),
		kgo.FetchMaxWait(time.Duration(o.fetchMaxWaitMs) * time.Millisecond),
		kgo.FetchMaxPartitionBytes(int32(o.maxPartitionFetchBytes)),
		kgo.FetchMaxBytes(int32(o.fetchMaxBytes)),
	}
	o.ignored("franz-go has no bound on fetched bytes buffered nor a CRC check to switch", "queued-max-kbytes", "check-crcs")
	if o.tasks > 1 {
		note("franz-go: --tasks %d: one goroutine polls every partition", o.tasks)
	}
	ck := newChecker(&o.common)

	w := startWindow()
	// The assignment starts the fetches: inside the window, as the contract's "from the assign".
	opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: parts}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return result{}, fmt.Errorf("franz-go: %w", err)
	}
	defer cl.Close()
	var lastErr string
	for ck.read.Load() < o.records {
		ctx, cancel := context.WithDeadline(context.Background(), ck.deadline())
		fetches := cl.PollFetches(ctx)
		cancel()
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) {
				continue
			}
			if msg := fe.Err.Error(); msg != lastErr {
				lastErr = msg
				note("franz-go: fetch partition %d: %v", fe.Partition, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { ck.record(int(r.Partition), r.Offset, r.Value) })
		if ck.idle() {
			break
		}
	}
	res := result{requests: hooks.fetch.Load(), version: moduleVersion("franz-go")}
	res.wall, res.cpu = w.end()
	ck.finish(&res)
	return res, nil
}
