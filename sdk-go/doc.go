// Package lanes is the Go client of Lanes, a partitioned message queue on PostgreSQL.
//
// Start with New, then use the fluent builders: Client.Queue for producing and consuming,
// Client.Transaction for atomic bundles, Client.Admin for management. The retry policy is
// docs/retries.md, the consume-loop semantics docs/consuming.md.
package lanes
