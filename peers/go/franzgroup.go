package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// groupPoll bounds one member's poll, so that it checks often enough whether to leave or stop.
const groupPoll = 100 * time.Millisecond

// groupCloseWait bounds the wait for the members' close at the end of a run.
const groupCloseWait = 30 * time.Second

func franzBalancer(name string) kgo.GroupBalancer {
	switch name {
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer()
	}
	return kgo.RangeBalancer()
}

// franzGroup runs the group with one kgo.Client per member (ConsumerGroup, ConsumeTopics,
// autocommit on with franz-go's default 5 s interval). Ownership comes from the
// OnPartitionsAssigned / Revoked / Lost callbacks. Setting OnPartitionsRevoked replaces
// franz-go's default revoke, a blocking commit, so the callback commits itself first
// (CommitUncommittedOffsets: every record polled, which this loop always hands out before it
// polls again). A member leaves with Client.Close: it revokes (the callback commits) and sends
// LeaveGroup.
func franzGroup(o groupOpts) (groupResult, error) {
	o.ignored("franz-go has no bound on fetched bytes buffered nor a CRC check to switch", "queued-max-kbytes", "check-crcs")
	win := startWindow()
	p := newProgress(&o)
	clients := make([]*kgo.Client, o.members)
	for m := range clients {
		opts := []kgo.Opt{
			kgo.SeedBrokers(o.brokers()...),
			kgo.ClientID(fmt.Sprintf("kafkit-bench-franz-go-%d", m)),
			kgo.ConsumerGroup(o.groupID),
			kgo.ConsumeTopics(o.topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.Balancers(franzBalancer(o.assignor)),
			kgo.SessionTimeout(time.Duration(o.sessionTimeoutMs) * time.Millisecond),
			kgo.HeartbeatInterval(time.Duration(o.heartbeatIntervalMs) * time.Millisecond),
			kgo.FetchMinBytes(int32(o.fetchMinBytes)),
			kgo.FetchMaxWait(time.Duration(o.fetchMaxWaitMs) * time.Millisecond),
			kgo.FetchMaxPartitionBytes(int32(o.maxPartitionFetchBytes)),
			kgo.FetchMaxBytes(int32(o.fetchMaxBytes)),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				p.assigned(m, a[o.topic])
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
				if err := cl.CommitUncommittedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
					note("franz-go: member %d: commit on revoke: %v", m, err)
				}
				p.revoked(m, r[o.topic])
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
				p.revoked(m, l[o.topic])
			}),
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			for _, c := range clients[:m] {
				c.Close()
			}
			return groupResult{}, fmt.Errorf("franz-go: member %d: %w", m, err)
		}
		clients[m] = cl
	}
	var wg sync.WaitGroup
	for m, cl := range clients {
		wg.Go(func() { franzMember(p, m, cl) })
	}
	why := p.wait()
	if !waitGroupFor(&wg, groupCloseWait) {
		note("franz-go: the members' close still waiting after %s; not waited for", groupCloseWait)
	}
	_, cpu := win.end()
	return p.result(cpu, moduleVersion("franz-go"), why), nil
}

// franzMember polls until told to stop (or, as the last member, until its share of the records
// is read), handing out every record polled, then closes its client (commit, LeaveGroup).
func franzMember(p *progress, m int, cl *kgo.Client) {
	var lastErr string
	for !p.stopped() {
		if p.shouldLeave(m) {
			p.leaving(m)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), groupPoll)
		fetches := cl.PollFetches(ctx)
		cancel()
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			if msg := fe.Err.Error(); msg != lastErr {
				lastErr = msg
				note("franz-go: member %d: fetch partition %d: %v", m, fe.Partition, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { p.record(m, r.Partition, r.Offset, r.Value) })
	}
	cl.Close()
}

// waitGroupFor waits for wg at most d; it says whether wg finished.
func waitGroupFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
