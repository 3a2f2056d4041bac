package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// sendChunk is how many messages one Writer.WriteMessages call takes: the Writer then balances
// and batches them under one lock instead of one call per message.
const sendChunk = 1000

// indexBalancer sends each message to the partition carried in its WriterData (record i to
// partition i % N). WriterData is the Writer's field for the application's own data: it never
// goes on the wire, so the records keep no key and no headers, and the choice does not depend on
// the order or the goroutine of the calls.
type indexBalancer struct {
	partitions int
	mismatch   atomic.Bool
}

func (b *indexBalancer) Balance(msg kafka.Message, partitions ...int) int {
	p, _ := msg.WriterData.(int)
	if len(partitions) != b.partitions {
		b.mismatch.Store(true)
	}
	return p
}

func kafkaGoCodec(name string) kafka.Compression {
	switch name {
	case "lz4":
		return kafka.Lz4
	case "zstd":
		return kafka.Zstd
	case "snappy":
		return kafka.Snappy
	case "gzip":
		return kafka.Gzip
	}
	return 0 // none
}

// kafkaGoWriter maps the bench's producer settings onto a kafka-go Writer.
func kafkaGoWriter(o produceOpts, balancer kafka.Balancer, completion func([]kafka.Message, error)) *kafka.Writer {
	w := &kafka.Writer{
		Addr:        kafka.TCP(o.brokers()...),
		Topic:       o.topic,
		Balancer:    balancer,
		Compression: kafkaGoCodec(o.compression),
		Async:       true,
		Completion:  completion,
	}
	switch o.acks {
	case "0":
		w.RequiredAcks = kafka.RequireNone
	case "1":
		w.RequiredAcks = kafka.RequireOne
	default:
		w.RequiredAcks = kafka.RequireAll
	}
	if o.set["batch-max-records"] && o.batchMaxRecords > 0 {
		w.BatchSize = o.batchMaxRecords
	}
	if o.set["batch-size"] && o.batchSize > 0 {
		w.BatchBytes = int64(o.batchSize)
	}
	if o.set["linger-ms"] {
		// kafka-go reads a BatchTimeout of 0 as its default, one second: no linger is the
		// shortest timeout instead.
		w.BatchTimeout = max(time.Duration(o.lingerMs)*time.Millisecond, time.Microsecond)
	}
	o.ignored("kafka-go's Writer has one request in flight per partition, no bound on what it buffers and retries by attempts, not by time",
		"max-in-flight", "buffer-memory", "max-buffered-records", "delivery-timeout-ms")
	return w
}

func kafkaGoProduce(o produceOpts) (result, error) {
	var (
		delivered, failed atomic.Int64
		first             firstError
	)
	completion := func(msgs []kafka.Message, err error) {
		if err != nil {
			failed.Add(int64(len(msgs)))
			first.set("%v", err)
			return
		}
		delivered.Add(int64(len(msgs)))
	}
	balancer := &indexBalancer{partitions: o.partitions}
	w := kafkaGoWriter(o, balancer, completion)
	value := recordValue(o.valueSize)
	ctx := context.Background()

	win := startWindow()
	// With --tasks N, N goroutines take every N-th record, in chunks of sendChunk messages.
	var wg sync.WaitGroup
	for t := range int64(o.tasks) {
		wg.Go(func() {
			chunk := make([]kafka.Message, 0, sendChunk)
			flush := func() {
				if err := w.WriteMessages(ctx, chunk...); err != nil {
					failed.Add(int64(len(chunk)))
					first.set("write: %v", err)
				}
				chunk = chunk[:0]
			}
			for i := t; i < o.records; i += int64(o.tasks) {
				chunk = append(chunk, kafka.Message{Value: value, WriterData: int(i % int64(o.partitions))})
				if len(chunk) == sendChunk {
					flush()
				}
			}
			if len(chunk) > 0 {
				flush()
			}
		})
	}
	wg.Wait()
	// Close sends what is buffered and waits for every batch's completion.
	if err := w.Close(); err != nil {
		first.set("close: %v", err)
	}
	res := result{version: moduleVersion("kafka-go")}
	res.wall, res.cpu = win.end()
	res.requests = w.Stats().Writes
	res.delivered = delivered.Load()
	res.failed = failed.Load()
	if missing := o.records - res.delivered - res.failed; missing > 0 {
		res.failed += missing
		first.set("%d records were neither acknowledged nor failed", missing)
	}
	if balancer.mismatch.Load() {
		first.set("kafka-go saw a partition count other than --partitions %d", o.partitions)
	}
	res.err = first.get()
	return res, nil
}

// kafkaGoConsume reads with one kafka.Reader per partition (no group), each in a goroutine of its
// own that checks its partition. The Reader is kafka-go's documented consumer API; it fetches
// ahead of the application in the background (Conn.ReadBatch in a loop, one partition per Fetch
// request) into a queue, so reading from it is the library's throughput path.
// closeWait bounds the wait for the Readers' Close after the window.
const closeWait = 5 * time.Second

func kafkaGoConsume(o consumeOpts) (result, error) {
	o.ignored("kafka-go's Reader fetches one partition per request (--max-partition-fetch-bytes is its MaxBytes), queues by messages and has no CRC check to switch",
		"fetch-max-bytes", "queued-max-kbytes", "check-crcs")
	if o.tasks > 1 {
		note("kafka-go: --tasks %d: one goroutine per partition in any case", o.tasks)
	}
	ck := newChecker(&o.common)
	readers := make([]*kafka.Reader, o.partitions)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	win := startWindow()
	for p := range readers {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:         o.brokers(),
			Topic:           o.topic,
			Partition:       p,
			MinBytes:        o.fetchMinBytes,
			MaxBytes:        o.maxPartitionFetchBytes,
			MaxWait:         time.Duration(o.fetchMaxWaitMs) * time.Millisecond,
			ReadLagInterval: -1,
		})
		if err := r.SetOffset(0); err != nil {
			return result{}, fmt.Errorf("kafka-go: partition %d: %w", p, err)
		}
		readers[p] = r
	}
	var wg sync.WaitGroup
	for p, r := range readers {
		wg.Go(func() {
			for !ck.done(p) {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						ck.first.set("partition %d: %v", p, err)
					}
					return
				}
				if m.Partition != p {
					ck.first.set("the reader of partition %d returned a record of partition %d", p, m.Partition)
				}
				ck.record(p, m.Offset, m.Value)
			}
		})
	}
	// Every reader stops at its partition's last record; a reader still waiting when no record
	// came for idleLimit is cancelled.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for waiting := true; waiting; {
		select {
		case <-finished:
			waiting = false
		case <-time.After(time.Until(ck.deadline())):
			if ck.idle() {
				cancel()
				<-finished
				waiting = false
			}
		}
	}
	res := result{version: moduleVersion("kafka-go")}
	res.wall, res.cpu = win.end()
	for _, r := range readers {
		res.requests += r.Stats().Fetches
	}
	// Reader.Close waits for the reader's fetch goroutine, which can stay blocked for minutes
	// after its partition's last record (seen with 1,000 readers): the result does not wait
	// for it more than closeWait.
	closed := make(chan struct{})
	go func() {
		for _, r := range readers {
			_ = r.Close()
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeWait):
		note("kafka-go: Reader.Close still waiting after %s; not waited for", closeWait)
	}
	ck.finish(&res)
	return res, nil
}
