package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicWait bounds how long a run waits for its topic to be usable.
const topicWait = 30 * time.Second

// waitTopic waits, before the window and on a connection of its own that is closed before the
// measured client starts, until the topic's metadata lists its N partitions and each leader
// serves its partition. A topic created just before the run may not be usable yet, and the
// clients treat that differently (kafka-go's Writer fails the write; franz-go waits for its next
// metadata refresh, up to MetadataMinAge = 5 s), which would measure the broker's topic creation
// instead of the client. An unreachable broker ends the run here (exit 2).
func waitTopic(c *common) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(topicWait)
	for {
		ready, why := topicReady(cl, c.topic, c.partitions)
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not usable after %s: %s", c.topic, topicWait, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// topicReady asks for the topic's metadata once and says whether every partition has a leader,
// or why not.
func topicReady(cl *kgo.Client, topic string, partitions int) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, err.Error()
	}
	if len(resp.Topics) != 1 {
		return false, fmt.Sprintf("metadata lists %d topics", len(resp.Topics))
	}
	rt := resp.Topics[0]
	if rt.ErrorCode != 0 {
		return false, fmt.Sprintf("error code %d", rt.ErrorCode)
	}
	if len(rt.Partitions) != partitions {
		return false, fmt.Sprintf("%d partitions, not --partitions %d", len(rt.Partitions), partitions)
	}
	for _, p := range rt.Partitions {
		if p.ErrorCode != 0 || p.Leader < 0 {
			return false, fmt.Sprintf("partition %d has no leader (error code %d)", p.Partition, p.ErrorCode)
		}
	}
	return leadersServe(ctx, cl, topic, partitions)
}

// leadersServe asks every partition's leader for its end offset. Apache Kafka publishes a new
// topic's leaders in its metadata before each leader has taken its partition over; until then a
// Produce gets NOT_LEADER_OR_FOLLOWER and franz-go waits for its next metadata refresh (up to
// MetadataMinAge, 5 s), inside the window. ListOffsets goes to the same leader (the client
// splits the request by leader) and answers that error too, without writing anything.
func leadersServe(ctx context.Context, cl *kgo.Client, topic string, partitions int) (bool, string) {
	req := kmsg.NewPtrListOffsetsRequest()
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Timestamp = -1 // the end offset
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, err.Error()
	}
	answered := 0
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode != 0 {
				return false, fmt.Sprintf("the leader of partition %d does not serve it yet (error code %d)", p.Partition, p.ErrorCode)
			}
			answered++
		}
	}
	if answered != partitions {
		return false, fmt.Sprintf("%d of %d partitions answered ListOffsets", answered, partitions)
	}
	return true, ""
}
