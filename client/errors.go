package client

import (
	"errors"
	"fmt"
)

// Errors of New, Check and Allow.
var (
	// ErrNoAddress: New was given no address.
	ErrNoAddress = errors.New("client: no address")
	// ErrNoItems: Check was called without items.
	ErrNoItems = errors.New("client: no items")
	// ErrNoLimit: Allow was called for a name that no WithLimit option
	// registered.
	ErrNoLimit = errors.New("client: no limit registered for this name")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrPeekWithHits: an Item sets both Peek and Hits.
	ErrPeekWithHits = errors.New("client: an item that peeks takes no hits")
	// ErrBadResponse: the node answered a different number of items than
	// it was asked.
	ErrBadResponse = errors.New("client: malformed response")
)

// ItemError is the error of one item that the node could not decide (an
// invalid limit, an unknown algorithm, a key too long): Result.Err holds it
// when Result.Status is StatusError.
type ItemError struct {
	// Index is the item's position in the call.
	Index int
	// Message is the node's explanation, naming the field
	// ("limit: must be positive, got 0").
	Message string
}

// Error returns the node's message, prefixed with the item's index.
func (e *ItemError) Error() string {
	return fmt.Sprintf("client: item %d: %s", e.Index, e.Message)
}
