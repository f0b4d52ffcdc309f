package sim

import "slices"

// actionState is what a timeline action remembers between its iterations.
type actionState struct {
	// node is the node a flap toggles, resolved at its first iteration.
	node int32
	// cuts are the directed links a flap cut, to restore them.
	cuts [][2]int
}

// scheduleActions puts every timeline event on the agenda.
func (c *Cluster) scheduleActions() {
	c.acts = make([]actionState, len(c.sc.Events))
	for i, e := range c.sc.Events {
		c.scheduleAction(i, 0, int64(e.At))
	}
}

func (c *Cluster) scheduleAction(idx int, iter uint32, at int64) {
	ev := c.q.newEvent()
	ev.at, ev.kind, ev.idx, ev.gen = at, evAction, int32(idx), iter
	c.q.push(ev)
}

// act fires iteration iter of timeline event idx.
func (c *Cluster) act(idx int32, iter uint32) error {
	e := c.sc.Events[idx]
	st := &c.acts[idx]
	n := len(c.nodes)
	switch e.Action {
	case "partition":
		group := c.groups(e)
		for i := range n {
			for j := range n {
				if group[i] != group[j] {
					c.net.setCut(i, j, 1)
				}
			}
		}
	case "isolate":
		if k := c.pick(e.Node); k >= 0 {
			c.isolate(int(k), 1, nil)
		}
	case "cut":
		from := c.pick(e.From)
		if from < 0 {
			break
		}
		for j := range n {
			if e.To == "*" || e.To == "" || c.pick(e.To) == int32(j) {
				c.net.setCut(int(from), j, 1)
			}
		}
	case "flap":
		if iter == 0 {
			st.node = c.pick(e.Node)
		}
		if st.node < 0 {
			break
		}
		if iter%2 == 0 && c.now < int64(e.Until) {
			st.cuts = st.cuts[:0]
			c.isolate(int(st.node), 1, &st.cuts)
		} else {
			for _, p := range st.cuts {
				c.net.setCut(p[0], p[1], -1)
			}
			st.cuts = st.cuts[:0]
		}
		if next := int64(e.At) + int64(iter+1)*int64(e.Every); iter%2 == 0 || next < int64(e.Until) {
			c.scheduleAction(int(idx), iter+1, min(next, int64(e.Until)))
		}
	case "heal":
		c.net.heal()
	case "clock":
		if k := c.pick(e.Node); k >= 0 {
			c.nodes[k].skew = int64(e.Offset)
		}
	case "crash":
		if k := c.pick(e.Node); k >= 0 {
			c.stopNode(k)
		}
	case "restart":
		if k := c.pick(e.Node); k >= 0 {
			c.restart(k, e)
		}
	case "leave":
		if k := c.pick(e.Node); k >= 0 {
			c.leaveNode(k)
		}
	case "join":
		return c.join()
	case "rolling-restart":
		if int(iter) >= c.sc.Nodes {
			break
		}
		c.restart(int32(iter), e)
		c.scheduleAction(int(idx), iter+1, c.now+int64(e.Every))
	case "churn":
		if k := c.pick("random"); k >= 0 && c.countPresent() > 1 {
			if iter%2 == 0 {
				c.stopNode(k)
			} else {
				c.leaveNode(k)
			}
			ev := c.q.newEvent()
			ev.at, ev.kind, ev.a = c.now+int64(e.Down), evStart, -1
			c.q.push(ev)
		}
		if next := c.now + int64(e.Every); next < int64(e.Until) {
			c.scheduleAction(int(idx), iter+1, next)
		}
	}
	c.reviewMembership()
	return nil
}

// isolate cuts node k from every other node, both ways, by delta, recording
// the links cut in rec when it is not nil.
func (c *Cluster) isolate(k int, delta int32, rec *[][2]int) {
	for j := range c.nodes {
		if j == k {
			continue
		}
		c.net.setCut(k, j, delta)
		c.net.setCut(j, k, delta)
		if rec != nil {
			*rec = append(*rec, [2]int{k, j}, [2]int{j, k})
		}
	}
}

// groups assigns every node a group number for a partition event.
func (c *Cluster) groups(e Event) []int {
	g := make([]int, len(c.nodes))
	if len(e.Groups) == 0 {
		k := int(e.Split*float64(len(c.nodes)) + 0.5)
		for i := range g {
			if i >= k {
				g[i] = 1
			}
		}
		return g
	}
	for i := range g {
		g[i] = len(e.Groups)
		for gi, names := range e.Groups {
			if slices.Contains(names, c.nodes[i].name) {
				g[i] = gi
			}
		}
	}
	return g
}

// restart takes node k down (gracefully when e.Graceful) and starts it
// again e.Down after it went down.
func (c *Cluster) restart(k int32, e Event) {
	s := c.nodes[k]
	if !s.running() {
		return
	}
	s.restartAfter = int64(e.Down)
	if e.Graceful && s.serving() {
		c.leaveNode(k)
		return
	}
	c.stopNode(k)
}

// join adds a new node and starts it.
func (c *Cluster) join() error {
	return c.startNode(c.addNode(1))
}

func (c *Cluster) countPresent() int {
	n := 0
	for _, s := range c.nodes {
		if s.present() {
			n++
		}
	}
	return n
}
