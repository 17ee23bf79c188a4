package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// popKnobs are the arguments pop and consume share (docs/conformance.md, the pop row).
var popKnobs = []string{"queue", "namespace", "task", "partition", "group", "subscriptionMode", "subscriptionFrom",
	"batch", "partitions", "autopilot", "wait", "timeoutMs", "leaseSeconds", "serverAutoAck"}

// stepArgs are the argument keys of every op (docs/conformance.md "Operations and their
// results"). The adapters read only the keys they know, so a misspelled knob would be dropped
// without a word and the step would run with the SDK's default: a case naming another key, or
// another op, fails to load.
var stepArgs = map[string][]string{
	"push":             {"queue", "partition", "items", "deadlineMs"},
	"bufferPush":       {"queue", "partition", "items", "messageCount", "retryDelayMs", "flushTimeoutMs", "maxSize", "pushTimeoutMs"},
	"pop":              append([]string{"save"}, popKnobs...),
	"ack":              {"messages", "indices", "status", "group", "error", "transactionId", "withoutLease"},
	"renew":            {"messages", "seconds"},
	"transaction":      {"ops"},
	"configure":        {"queue", "options", "namespace", "task"},
	"seek":             {"group", "queue", "partition", "toEnd", "mark"},
	"mark":             {"name"},
	"sleep":            {"ms"},
	"dlq":              {"queue", "group", "save", "limit", "offset", "after", "afterPage"},
	"dlqAll":           {"queue", "group", "limit", "pauseAfter", "save"},
	"kvGet":            {"ns", "key"},
	"kvPut":            {"ns", "key", "value", "ttlSeconds", "expect", "ifAbsent"},
	"kvDelete":         {"ns", "key", "expect"},
	"kvIncr":           {"ns", "key", "delta", "ttlSeconds", "min", "max"},
	"kvBatch":          {"ops"},
	"timerSchedule":    {"queue", "key", "delayMs", "data", "partition", "transactionId"},
	"timerReschedule":  {"queue", "key", "delayMs", "data", "partition", "transactionId"},
	"timerBatch":       {"ops"},
	"timerGet":         {"queue", "key"},
	"timerCancel":      {"queue", "key"},
	"timerList":        {"queue", "limit", "after", "prefix"},
	"dlqReplay":        {"dlq", "index", "id", "queue", "partition"},
	"dlqPurge":         {"queue", "group"},
	"messageGet":       {"messages", "walk", "index", "partitionId", "transactionId"},
	"messageDelete":    {"messages", "walk", "index", "partitionId", "transactionId"},
	"messageRetry":     {"messages", "walk", "index", "partitionId", "transactionId"},
	"groups":           {"prefix"},
	"groupDelete":      {"group", "queue", "deleteMetadata"},
	"lagging":          {"minLagSeconds", "prefix"},
	"queueGet":         {"queue"},
	"queueDelete":      {"queue"},
	"queues":           {"namespace", "task", "limit", "offset", "after", "afterPage", "save"},
	"queuesAll":        {"namespace", "task", "limit", "pauseAfter", "save"},
	"depth":            {"queue", "group"},
	"overview":         {},
	"namespaces":       {"prefix"},
	"tasks":            {"prefix"},
	"messages":         {"queue", "partition", "status", "limit", "offset", "after", "afterPage", "save"},
	"messagesAll":      {"queue", "partition", "status", "limit", "pauseAfter", "save"},
	"status":           {"queue", "namespace", "task"},
	"queueStatuses":    {"queue", "namespace", "task", "limit", "offset", "after", "afterPage", "save"},
	"queueStatusesAll": {"queue", "namespace", "task", "limit", "pauseAfter", "save"},
	"walkResume":       {"walk", "pauseAfter"},
	"queueStatus":      {"queue", "includePartitions"},
	"bufferStatus":     {},
	"metrics":          {},
	"health":           {},
	"maintenance":      {"scope"},
	"setMaintenance":   {"scope", "enabled"},
	"group":            {"group"},
	"subscription":     {"group", "mark"},
	"kvList":           {"ns", "prefix", "after", "limit", "keysOnly", "includeExpired"},
	"kvNamespaces":     {"prefix"},
	"close":            {},
	"logs":             {"level"},
	"consume": append([]string{"concurrency", "limit", "idleMs", "renewEveryMs", "autoAck", "handler",
		"softStopTimeoutMs", "reportHandlerErrors", "stopWhenHandled", "stopAfterMs", "stop", "maxMs"}, popKnobs...),
	"iterate": append([]string{"limit", "idleMs", "autoAck", "break", "maxMs"}, popKnobs...),
}

// clientArgs are the keys of a case's client options (docs/conformance.md "Client options").
// The adapters read only the keys they know, as with stepArgs, so a case naming another fails
// to load.
var clientArgs = []string{"retryAttempts", "retryDelayMs", "maxRetryDelayMs", "max429Attempts",
	"maxRetryAfterMs", "timeoutMs", "popAutopilot", "env", "urls", "healthRetryAfterMs", "bearerToken",
	"bearerTokenFunc", "headers", "headersInOrder", "callerTransport", "captureLogs"}

// checkClientArgs refuses a client option clientArgs does not list, and a urls list that does
// not name the case's broker ("${url}") exactly once: without it the case would never reach
// the validating proxy, with it twice a failover could not be told from a retry in place.
func checkClientArgs(opts map[string]any) error {
	var unknown []string
	for k := range opts {
		if !slices.Contains(clientArgs, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("client: unknown option %s (it takes %s)", strings.Join(unknown, ", "), strings.Join(clientArgs, ", "))
	}
	if pairs, ok := opts["headersInOrder"]; ok {
		list, _ := pairs.([]any)
		for _, p := range list {
			pair, _ := p.([]any)
			if len(pair) != 2 || !isString(pair[0]) || !isString(pair[1]) {
				return fmt.Errorf("client: headersInOrder holds %v, want [name, value] pairs of strings", p)
			}
		}
		if len(list) == 0 {
			return fmt.Errorf("client: headersInOrder is %v, want a list of [name, value] pairs", pairs)
		}
	}
	if urls, ok := opts["urls"]; ok {
		list, _ := urls.([]any)
		brokers := 0
		for _, u := range list {
			s, isString := u.(string)
			if !isString || s == "" {
				return fmt.Errorf("client: urls holds %v, want URL strings", u)
			}
			if s == "${url}" {
				brokers++
			}
		}
		if brokers != 1 {
			return fmt.Errorf(`client: urls must name the case's broker "${url}" exactly once, got %v`, urls)
		}
	}
	return nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

// checkStepArgs refuses an op the table does not list and any argument key it does not list
// for the op.
func checkStepArgs(op string, args map[string]any) error {
	known, ok := stepArgs[op]
	if !ok {
		return fmt.Errorf("unknown operation %q", op)
	}
	allowed := map[string]bool{}
	for _, k := range known {
		allowed[k] = true
	}
	var unknown []string
	for k := range args {
		if !allowed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return checkPause(op, args)
	}
	sort.Strings(unknown)
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	return fmt.Errorf("%s: unknown argument %s (it takes %s)", op, strings.Join(unknown, ", "), strings.Join(sorted, ", "))
}

// checkPause refuses a walk step that pauses without save: no walkResume step could name the
// walk, so the rows after the pause would go unread.
func checkPause(op string, args map[string]any) error {
	_, pauses := args["pauseAfter"]
	if save, _ := args["save"].(string); pauses && save == "" && op != "walkResume" {
		return fmt.Errorf("%s: pauseAfter needs save, the name a walkResume step continues the walk by", op)
	}
	return nil
}
