package lanes

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxNameBytes is the broker's limit on queue and partition names.
const maxNameBytes = 512

// checkPushNames applies the broker's name rule to a push target, so a buffer can refuse a
// name before it holds items the broker would refuse. An empty partition means "Default".
func checkPushNames(queue, partition string) error {
	return checkNames(queue, partition, false)
}

// checkPopNames applies the broker's name rule to a pop target, so a pop, consume loop or
// iterator refuses a name before sending ("." and ".." would reach another route, answered
// 404 no_such_route). A discovery builder (no queue) names nothing.
func (q QueueBuilder) checkPopNames() error {
	if err := checkGroup(q.group); err != nil {
		return err
	}
	if q.queue == "" {
		return nil
	}
	return checkNames(q.queue, q.partition, q.hasPartition)
}

// checkGroup refuses a consumer group name of only white space, which the broker refuses (400)
// on a pop or seek and would take as a group of its own elsewhere (an ack, a delete): the SDK
// refuses it everywhere it takes a group, before sending. "" means no group (queue mode, or
// every group) where the call allows that.
func checkGroup(group string) error {
	if group != "" && strings.TrimSpace(group) == "" {
		return &InvalidNameError{Field: "group", Name: group, Reason: "must hold more than white space"}
	}
	return nil
}

// checkGroupNamed is checkGroup for a route that names the group in its path, where "" would
// reach another route.
func checkGroupNamed(group string) error {
	if group == "" {
		return &InvalidNameError{Field: "group", Name: group, Reason: "must be a non-empty string"}
	}
	return checkGroup(group)
}

// checkNames is the broker's name rule for a queue and a partition; an empty partition is
// refused only when the route names one.
func checkNames(queue, partition string, partitionNamed bool) error {
	if strings.TrimSpace(queue) == "" {
		return &InvalidNameError{Field: "queue", Name: queue, Reason: "must be a non-empty string"}
	}
	if reason := nameProblem(queue); reason != "" {
		return &InvalidNameError{Field: "queue", Name: queue, Reason: reason}
	}
	if partition == "" && partitionNamed {
		return &InvalidNameError{Field: "partition", Name: partition, Reason: "must be a non-empty string"}
	}
	if partition == "" {
		return nil
	}
	if strings.TrimSpace(partition) == "" {
		return &InvalidNameError{Field: "partition", Name: partition, Reason: "must hold more than white space"}
	}
	if reason := nameProblem(partition); reason != "" {
		return &InvalidNameError{Field: "partition", Name: partition, Reason: reason}
	}
	return nil
}

// dotNameReason is why "." and ".." are refused as names in a URL path.
const dotNameReason = `must not be "." or ".." (URL clients drop such path segments)`

// nameProblem says why the broker refuses value as a name, or "".
func nameProblem(value string) string {
	switch {
	case value == "." || value == "..":
		return dotNameReason
	case len(value) > maxNameBytes:
		return "is longer than " + strconv.Itoa(maxNameBytes) + " bytes"
	case strings.IndexByte(value, 0) >= 0:
		return "must not contain a NUL character"
	case !utf8.ValidString(value):
		return "must be valid UTF-8"
	}
	return ""
}
