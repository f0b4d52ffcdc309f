package sync

import "sync/atomic"

// Metrics are a Node's counters; Node.HotKeys lists the hottest keys. Every field is updated atomically by the
// Node and may be read at any time; the driver exports them (package peer's
// Prometheus collector).
type Metrics struct {
	// Decisions counts decided requests by mode (index Mode) and outcome:
	// [mode][0] allowed, [mode][1] rejected, [mode][2] error.
	Decisions [5][3]atomic.Int64
	// Degraded counts requests decided by the partition policy, without the owner.
	Degraded atomic.Int64
	// Forwarded counts owner-mode checks sent to another node; ForwardBatches
	// the messages that carried them.
	Forwarded, ForwardBatches atomic.Int64
	// FlushesSent, FlushesRetried, FlushItemsDropped and FlushDuplicates count
	// flushes sent, sent again after a timeout, items dropped from a full
	// retry buffer, and batches an owner received twice and ignored.
	FlushesSent, FlushesRetried, FlushItemsDropped, FlushDuplicates atomic.Int64
	// PushesSent counts push messages sent by this node as owner.
	PushesSent atomic.Int64
	// LeasesGranted, LeasesRenewed and LeasesReturned count lease traffic;
	// LeaseTokensGranted and LeaseTokensReturned the tokens moved.
	LeasesGranted, LeasesRenewed, LeasesReturned atomic.Int64
	LeaseTokensGranted, LeaseTokensReturned      atomic.Int64
	// LeaseTokensRefused counts tokens peers gave back beyond what this
	// node granted them on the key and had not seen returned: refused, not
	// refunded (a forged or replayed return, or one too late, lease.go).
	LeaseTokensRefused atomic.Int64
	// HandoffsSent and HandoffKeys count hand-off messages and the keys they
	// carried; HandoffsReceived those merged by this node as new owner.
	HandoffsSent, HandoffKeys, HandoffsReceived atomic.Int64
	// HandoffsDropped counts hand-off messages given up after MaxRetries
	// (their keys are rebuilt by the new owner from the non-owners' reports).
	HandoffsDropped atomic.Int64
	// Keys is the number of keys stored now; Evicted counts idle and LRU
	// evictions.
	Keys, Evicted atomic.Int64
	// KeyBytes is the memory charged now for the stored keys, the held
	// backups and the hand-offs not yet acknowledged, in bytes (Config.MaxKeyBytes bounds it; budget.go).
	KeyBytes atomic.Int64
	// FlushesAcked counts flush acknowledgements received; PushesReceived
	// push messages received; ForwardTimeouts owner-mode checks decided by the
	// partition policy after RequestTimeout or an unreachable owner.
	FlushesAcked, PushesReceived, ForwardTimeouts atomic.Int64
	// NotOwner counts items this node was sent for keys it does not own
	// (answered not-owner; the sender routes them again).
	NotOwner atomic.Int64
	// FlushItemsDeferred counts flushed items this node, their new owner,
	// answered as not applied because the key's state was still on its way
	// from the previous owner (the sender flushes them again).
	FlushItemsDeferred atomic.Int64
	// Contested counts the times a check was refused by the owner this
	// node's ring names and held for the rings to agree (contest.go).
	Contested atomic.Int64
	// EnvelopesDropped counts envelopes dropped because the sender is not a
	// current member or the envelope is addressed to another node.
	EnvelopesDropped atomic.Int64
	// Malformed counts message items dropped because a state, limit or count
	// in them was invalid, and envelopes with no known body.
	Malformed atomic.Int64
	// PeerRestarts counts peers seen with a new incarnation;
	// MembershipRejected memberships SetMembers could not use.
	PeerRestarts, MembershipRejected atomic.Int64
	// BackupsSent and BackupKeys count the backup messages this node sent as
	// owner and the key states they carried; BackupsRetried the batches not
	// acknowledged in time (their keys go again with the next round).
	// BackupsReceived counts backup messages kept for other owners,
	// BackupKeysDropped states not kept because MaxKeys were held or
	// the byte budget had no room for them (budget.go), and
	// BackupKeysRestored held states given to a key's new owner after their
	// owner left without handing off, or restarted (backup.go).
	// BackupsRefused counts backup messages not acknowledged because they
	// carried a key the sender does not own in this node's view.
	// BackupKeysNotKept counts, at the owner, the states its backup target
	// acknowledged as not kept (BackupKeysDropped there): their fences did
	// not rise (fence.go).
	BackupsSent, BackupKeys, BackupsRetried                atomic.Int64
	BackupsReceived, BackupKeysDropped, BackupKeysRestored atomic.Int64
	BackupsRefused, BackupKeysNotKept                      atomic.Int64
	// ClockOffsetNs is this node's clock minus cluster time, in ns, as last
	// measured (clock.go); ClockSkewed is 1 while its magnitude exceeds
	// Config.MaxClockOffset, else 0. ClockSteps counts the times the
	// correction moved (every held state shifted); ClockRebased the
	// envelopes whose states were shifted on receipt to this node's time.
	ClockOffsetNs, ClockSkewed, ClockSteps, ClockRebased atomic.Int64
	// PolicyHitsCharged counts hits admitted by a partition policy without
	// the key's owner and recorded to be charged to its bucket;
	// PolicyHitsDrained those charged since (applied by the owner, as its
	// answer to the flush that carried them says, or drained here); PolicyHitsUncharged those not recorded: beyond one bucket of
	// debt per key, or with MaxKeys keys in debt already (charge.go).
	PolicyHitsCharged, PolicyHitsDrained, PolicyHitsUncharged atomic.Int64
	// FenceWaits counts checks that waited for their key's backup to be
	// acknowledged before the owner decided them; FenceTimeouts those that
	// waited RequestTimeout in vain and went to the partition policy
	// (fence.go).
	FenceWaits, FenceTimeouts atomic.Int64
	// DeposedKeys counts owned states dropped on the return from a
	// minority side: the majority decided those keys meanwhile, and their
	// states come back by hand-off (quorum.go, deposed).
	DeposedKeys atomic.Int64
	// DrainedStarts counts keys a Joining node started to own drained as
	// of its start, not full: no member sent their state (lostkey.go).
	DrainedStarts atomic.Int64
	// LateViewHits counts the hits an owner charged from late views of a
	// failed owner's state: what a survivor's view showed consumed beyond
	// the state the owner took the key over from (lateview.go).
	LateViewHits atomic.Int64
	// TakeoversUnconfirmed counts the membership changes that gave this
	// node partitions of a failed member to be confirmed by a majority
	// heard from (confirm.go); UnconfirmedChecks the checks of their keys,
	// local or forwarded, not decided here as owner meanwhile (decided by
	// the policy, or answered not-owner).
	TakeoversUnconfirmed, UnconfirmedChecks atomic.Int64
	// LeaseEchoRequests counts the echo requests sent to renew this node's
	// ownership lease; LeaseWaits the checks that found no lease and waited
	// for its renewal (ownerlease.go).
	LeaseEchoRequests, LeaseWaits atomic.Int64
	// FloodCapped counts entries not kept, or folded into others, because
	// a structure outside the key budget reached its cap (budget.go,
	// "Side structures"): keys recorded as handed to an open mark, states
	// a leaving node keeps for no owner, grants of keys with no owned
	// record.
	FloodCapped atomic.Int64
}
