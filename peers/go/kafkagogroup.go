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

// kafkaGoCommitInterval is how often a kafka-go member commits what it handed out (the other
// clients' auto-commit default; kafka-go's ConsumerGroup commits only when asked).
const kafkaGoCommitInterval = 5 * time.Second

// kafkaGoGroup runs the group with one kafka.ConsumerGroup per member. kafka-go's Reader with a
// GroupID tells nothing of its assignments, so each member drives the ConsumerGroup itself, as
// the Reader does inside: for each generation (ConsumerGroup.Next) it owns gen.Assignments,
// reads each assigned partition with a kafka.Reader of its own (no group) from the committed
// offset (FirstOffset when none), commits what it handed out every 5 s and when the generation
// ends (gen.Start's context is done: kafka-go's ConsumerGroup is eager, so every partition is
// revoked then), and leaves with ConsumerGroup.Close (the generation ends, the member commits,
// then LeaveGroup).
func kafkaGoGroup(o groupOpts) (groupResult, error) {
	o.ignored("kafka-go's Reader fetches one partition per request (--max-partition-fetch-bytes is its MaxBytes), queues by messages and has no CRC check to switch",
		"fetch-max-bytes", "queued-max-kbytes", "check-crcs")
	var balancer kafka.GroupBalancer = kafka.RangeGroupBalancer{}
	if o.assignor == "roundrobin" {
		balancer = kafka.RoundRobinGroupBalancer{}
	}
	win := startWindow()
	p := newProgress(&o)
	groups := make([]*kafka.ConsumerGroup, o.members)
	for m := range groups {
		cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID:                o.groupID,
			Brokers:           o.brokers(),
			Dialer:            &kafka.Dialer{ClientID: fmt.Sprintf("kafkit-bench-kafka-go-%d", m), Timeout: 10 * time.Second, DualStack: true},
			Topics:            []string{o.topic},
			GroupBalancers:    []kafka.GroupBalancer{balancer},
			HeartbeatInterval: time.Duration(o.heartbeatIntervalMs) * time.Millisecond,
			SessionTimeout:    time.Duration(o.sessionTimeoutMs) * time.Millisecond,
			StartOffset:       kafka.FirstOffset,
		})
		if err != nil {
			for _, g := range groups[:m] {
				_ = g.Close()
			}
			return groupResult{}, fmt.Errorf("kafka-go: member %d: %w", m, err)
		}
		groups[m] = cg
	}
	var wg sync.WaitGroup
	for m, cg := range groups {
		wg.Go(func() { kafkaGoMember(&o, p, m, cg) })
	}
	why := p.wait()
	if !waitGroupFor(&wg, groupCloseWait) {
		note("kafka-go: the members' close still waiting after %s; not waited for", groupCloseWait)
	}
	_, cpu := win.end()
	return p.result(cpu, moduleVersion("kafka-go"), why), nil
}

// kafkaGoMember takes the member's generations one after the other until it leaves (the last
// member, once its share is read) or the run stops; then it closes the group.
func kafkaGoMember(o *groupOpts, p *progress, m int, cg *kafka.ConsumerGroup) {
	// leave is closed when this member should leave (or the run stops): the generation's
	// readers stop and Next returns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan struct{})
	go func() {
		// Close ends the current generation (its readers stop, the member commits) and then
		// sends LeaveGroup; it returns when both are done.
		defer close(closed)
		leaveTick := time.NewTicker(10 * time.Millisecond)
		defer leaveTick.Stop()
		for {
			select {
			case <-p.stop:
			case <-leaveTick.C:
				if !p.shouldLeave(m) {
					continue
				}
				p.leaving(m)
			}
			cancel()
			_ = cg.Close()
			return
		}
	}()
	var lastErr string
	for ctx.Err() == nil {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				break
			}
			if msg := err.Error(); msg != lastErr {
				lastErr = msg
				note("kafka-go: member %d: next generation: %v", m, err)
			}
			continue
		}
		// The generation's one function: it returns only when the generation ends (the group
		// waits for it before it joins again), so every partition's commit is sent first.
		genDone := make(chan struct{})
		gen.Start(func(gctx context.Context) {
			defer close(genDone)
			kafkaGoGeneration(gctx, o, p, m, gen)
		})
		<-genDone
	}
	<-closed
}

// kafkaGoGeneration reads the generation's partitions until its context is done, commits what
// was handed out, and gives the partitions up.
func kafkaGoGeneration(ctx context.Context, o *groupOpts, p *progress, m int, gen *kafka.Generation) {
	assignments := gen.Assignments[o.topic]
	parts := make([]int32, len(assignments))
	// next[i]: the offset after the last record of assignments[i] handed out (-1: none yet).
	next := make([]atomic.Int64, len(assignments))
	for i, a := range assignments {
		parts[i] = int32(a.ID)
		next[i].Store(-1)
	}
	p.assigned(m, parts)
	committed := make([]int64, len(assignments))
	for i := range committed {
		committed[i] = -1
	}
	commit := func(why string) {
		offsets := map[int]int64{}
		for i, a := range assignments {
			if n := next[i].Load(); n >= 0 && n != committed[i] {
				offsets[a.ID] = n
			}
		}
		if len(offsets) == 0 {
			return
		}
		if err := gen.CommitOffsets(map[string]map[int]int64{o.topic: offsets}); err != nil {
			note("kafka-go: member %d: commit %s: %v", m, why, err)
			return
		}
		for i, a := range assignments {
			if n, ok := offsets[a.ID]; ok {
				committed[i] = n
			}
		}
	}

	rctx, stopReaders := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	readers := make([]*kafka.Reader, len(assignments))
	for i, a := range assignments {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:         o.brokers(),
			Topic:           o.topic,
			Partition:       a.ID,
			MinBytes:        o.fetchMinBytes,
			MaxBytes:        o.maxPartitionFetchBytes,
			MaxWait:         time.Duration(o.fetchMaxWaitMs) * time.Millisecond,
			ReadLagInterval: -1,
		})
		readers[i] = r
		start := a.Offset
		if start < 0 {
			start = kafka.FirstOffset
		}
		if err := r.SetOffset(start); err != nil {
			p.first.set("kafka-go: member %d partition %d: set offset %d: %v", m, a.ID, start, err)
			continue
		}
		wg.Go(func() {
			for {
				msg, err := r.ReadMessage(rctx)
				if err != nil {
					if rctx.Err() == nil {
						note("kafka-go: member %d partition %d: %v", m, a.ID, err)
					}
					return
				}
				p.record(m, int32(msg.Partition), msg.Offset, msg.Value)
				next[i].Store(msg.Offset + 1)
			}
		})
	}
	tick := time.NewTicker(kafkaGoCommitInterval)
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-tick.C:
			commit("every 5 s")
		}
	}
	tick.Stop()
	// The generation ended: stop handing out records, commit them all, give the partitions up.
	stopReaders()
	wg.Wait()
	commit("at the generation's end")
	p.revoked(m, parts)
	// Reader.Close waits for its fetch goroutine, which can stay blocked long after the last
	// record: nothing of it is handed out any more, so it is not waited for.
	go func() {
		for _, r := range readers {
			_ = r.Close()
		}
	}()
}
