// The phones of a family of 8 people, 2 clients each, driven step by step
// by cmd/nah/mls_test.go: one JSON line a step on stdin
// ({"step": NAME, "base": URL?}), one JSON line an answer on stdout
// ({"step", "ok": true, ...} or {"step", "error"}); the burst step also
// prints {"event":"acked"} lines, so the test can kill the server in the
// middle of it. The phones keep their MLS state in memory across the
// server's restarts. Every check that fails ends the step with an error.
import { createInterface } from 'node:readline'
import { Person, Phone, Server } from './phone.mjs'

const server = new Server('')
const people = []
const byID = new Map() // person id → Person
const phones = [] // every phone; .offline ones do not sync until they come back
const edges = [[0, 1], [0, 2], [0, 3], [0, 4], [0, 5], [1, 2], [2, 3], [3, 4], [5, 6], [6, 7], [1, 7]]
const connected = new Set()
const key = (a, b) => [a.id, b.id].sort().join()
const posts = [] // every moment nah acknowledged: {id, author, body, text, readers}
const expected = new Map() // phone → Set of moment ids it must read
let acked = []
let n = 0

// check ends the step at once; expect notes a failure and lets the step
// go on, so that one planted bug shows every check it breaks.
const check = (ok, why) => { if (!ok) throw new Error(why) }
let failed = []
const expect = (ok, why) => { if (!ok) failed.push(why) }
const phonesOf = (p) => phones.filter((x) => x.person === p)
const audience = (p) => phones.filter((x) => x.admitted &&
  (x.person === p || connected.has(key(x.person, p))))

// post sends a moment from phone x and records who must read it: every
// admitted phone of its person and of its connections.
async function post (x) {
  const text = `${x.person.handle}/${x.name} #${++n}`
  const res = await x.post(text)
  if (res.status === 201) {
    const m = { id: res.body.id, author: x.person, text, readers: audience(x.person) }
    posts.push(m)
    for (const r of m.readers) expected.get(r).add(m.id)
  }
  return res
}

async function syncEveryone () {
  for (const x of phones) if (!x.offline) await x.syncAll()
}

// verifyReading: every phone read every moment it must, with its text.
function verifyReading () {
  let reads = 0
  for (const x of phones) {
    for (const id of expected.get(x)) {
      const m = posts.find((p) => p.id === id)
      const g = x.groups.get(m.author.id)
      const got = g && g.plain.get(id)
      check(got === m.text, `${x.person.handle}/${x.name} did not read ${m.text} (${id}): got ${got}`)
      reads++
    }
  }
  return reads
}

async function newPhone (p, name) {
  const x = new Phone(p, name)
  x.people = byID
  await x.register()
  await x.uploadKeyPackages(10)
  phones.push(x)
  expected.set(x, new Set())
  return x
}

const steps = {
  async setup () {
    for (let i = 0; i < 8; i++) {
      const p = new Person(server, `fam${i}`)
      await p.signup()
      people.push(p)
      byID.set(p.id, p)
    }
    for (const p of people) for (const name of ['phone', 'tablet']) await newPhone(p, name)
    for (const [a, b] of edges) {
      await people[a].connect(people[b])
      connected.add(key(people[a], people[b]))
    }
    for (const p of people) await phonesOf(p)[0].createGroup()
    let added = 0
    for (const p of people) added += (await phonesOf(p)[0].tend(p.id)).added
    for (const x of phones) {
      await x.inbox()
      x.admitted = true
      const groups = 1 + edges.filter(([a, b]) => people[a] === x.person || people[b] === x.person).length
      check(x.groups.size === groups, `${x.person.handle}/${x.name} joined ${x.groups.size} groups from its inbox, want ${groups}`)
    }
    for (const x of phones) check((await post(x)).status === 201, `${x.name} of ${x.person.handle} could not post`)
    await syncEveryone()
    return { added, reads: verifyReading() }
  },

  // check: everyone syncs, then every phone read every moment it must.
  async check () {
    await syncEveryone()
    return { reads: verifyReading() }
  },

  // post: every phone not offline posts one moment at its epoch.
  async post () {
    await syncEveryone()
    for (const x of phones) {
      if (x.offline) continue
      const res = await post(x)
      check(res.status === 201, `${x.person.handle}/${x.name} could not post: ${res.status} ${JSON.stringify(res.body)}`)
    }
    return { posts: posts.length }
  },

  // disconnect: fam0 drops fam1. Each side's next moment is refused until
  // its phone commits the Remove of the other's clients; then fam0's new
  // moment cannot be read by fam1's phones (tried), which keep fam0's old ones.
  async disconnect () {
    const [a, b] = people
    await syncEveryone()
    const before = phonesOf(b).map((x) => [...x.groups.get(a.id).plain.keys()].length)
    await a.disconnect(b)
    connected.delete(key(a, b))
    const pa = phonesOf(a)[0]
    const pb = phonesOf(b)[0]
    for (const x of [pa, pb]) {
      const res = await post(x)
      expect(res.status === 409 && res.body.error.code === 'removal_pending',
        `${x.person.handle}'s moment before the Remove commit: ${res.status} ${JSON.stringify(res.body)}, want 409 removal_pending`)
    }
    const ra = await pa.tend(a.id)
    const rb = await pb.tend(b.id)
    expect(ra.removed === 2 && rb.removed === 2, `the Remove commits removed ${ra.removed} and ${rb.removed} leaves, want 2 and 2`)
    await syncEveryone()
    const res = await post(pa)
    expect(res.status === 201, `fam0's moment after the Remove: ${res.status}`)
    expect((await post(pb)).status === 201, 'fam1\'s moment after its Remove')
    const body = (await a.moments(a.id)).find((m) => m.id === (res.body || {}).id)?.body || ''
    let tried = 0
    for (const [i, x] of phonesOf(b).entries()) {
      expect(await x.tryDecrypt(a.id, body) === null, `${b.handle}/${x.name} read fam0's moment posted after the disconnect`)
      tried++
      const kept = [...x.groups.get(a.id).plain.keys()].length
      expect(kept === before[i] && kept > 0, `${b.handle}/${x.name} kept ${kept} of fam0's ${before[i]} old moments`)
    }
    expect(await b.moments(a.id) === null, 'fam1 still lists fam0\'s moments after the disconnect')
    return { removed: ra.removed + rb.removed, tried }
  },

  // race: fam2's two clients commit at the same epoch; nah takes exactly
  // one, the other catches up, and both end in the same epoch with the
  // same epoch authenticator.
  async race () {
    const p = people[2]
    const [x, y] = phonesOf(p)
    await x.sync(p.id)
    await y.sync(p.id)
    const e = x.epoch(p.id)
    check(y.epoch(p.id) === e, 'fam2\'s clients start the race at different epochs')
    const res = await Promise.all([x.commit(p.id), y.commit(p.id)])
    const won = res.filter((r) => r.status === 201)
    const lost = res.filter((r) => r.status === 409 && r.body.error.code === 'epoch_conflict')
    check(won.length === 1 && lost.length === 1,
      `two commits at epoch ${e}: ${res.map((r) => `${r.status} ${JSON.stringify(r.body)}`).join(', ')}; want one 201 and one 409 epoch_conflict`)
    check(BigInt(lost[0].body.epoch) === e + 1n, `the 409's epoch is ${lost[0].body.epoch}, want ${e + 1n}`)
    await x.sync(p.id)
    await y.sync(p.id)
    check(x.epoch(p.id) === e + 1n && y.epoch(p.id) === e + 1n, `after the race: epochs ${x.epoch(p.id)} and ${y.epoch(p.id)}, want ${e + 1n}`)
    check(x.authenticator(p.id) === y.authenticator(p.id), 'the two clients disagree on the group after the race')
    return { epoch: Number(e + 1n) }
  },

  // offline: fam3's tablet is away while its phone commits 50 times,
  // posting every 10 epochs; back, it catches up from the log and reads
  // the 5 moments, each in its epoch.
  async offline () {
    const p = people[3]
    const [x, y] = phonesOf(p)
    await syncEveryone()
    y.offline = true
    const e = x.epoch(p.id)
    for (let i = 1; i <= 50; i++) {
      const res = await x.commit(p.id)
      check(res.status === 201, `commit ${i} of 50: ${res.status} ${JSON.stringify(res.body)}`)
      if (i % 10 === 0) check((await post(x)).status === 201, `moment after commit ${i}`)
    }
    y.offline = false
    const r = await y.syncAll()
    check(y.epoch(p.id) === e + 50n && y.authenticator(p.id) === x.authenticator(p.id),
      `the tablet back from 50 epochs is at ${y.epoch(p.id)}, want ${e + 50n} with the phone's authenticator`)
    check(r.undecrypted.length === 0, `the tablet could not read ${r.undecrypted}`)
    return { epochs: 50, caughtUp: r.decrypted }
  },

  // newclient: fam4 gets a third client; its own group and each
  // connection's group add it (nah lists it as waiting); it reads the new
  // moments of all of them.
  async newclient () {
    const p = people[4]
    const z = await newPhone(p, 'laptop')
    let added = (await phonesOf(p)[0].tend(p.id)).added
    for (const q of people) if (connected.has(key(p, q))) added += (await phonesOf(q)[0].tend(q.id)).added
    const groups = 1 + people.filter((q) => connected.has(key(p, q))).length
    check(added === groups, `the new client was added to ${added} groups, want ${groups}`)
    await z.inbox()
    check(z.groups.size === groups, `the new client joined ${z.groups.size} groups, want ${groups}`)
    z.admitted = true
    return { groups }
  },

  // away: fam6's tablet goes away while its phone commits twice and
  // posts, and every other phone reads on: the tablet's place in the log
  // alone holds those commits.
  async away () {
    const p = people[6]
    const [x, y] = phonesOf(p)
    await syncEveryone()
    y.offline = true
    for (let i = 0; i < 2; i++) check((await x.commit(p.id)).status === 201, `fam6's commit ${i + 1} while the tablet is away`)
    check((await post(x)).status === 201, 'fam6\'s moment while the tablet is away')
    await syncEveryone()
    return { epoch: Number(x.epoch(p.id)) }
  },

  // rejoin: the test aged fam6's log past the retention with the server
  // stopped. fam6's phone commits (nah prunes the aged commits though the
  // tablet has not passed them) and posts; the tablet back is told 410
  // log_pruned, joins again from the GroupInfo with an external commit,
  // and reads the next moment, as do fam6's connections, which follow the
  // external commit in the log. What it posted in the epochs it missed
  // stays unreadable to the tablet.
  async rejoin () {
    const p = people[6]
    const [x, y] = phonesOf(p)
    await x.sync(p.id)
    check((await x.commit(p.id)).status === 201, 'fam6\'s commit after the log aged')
    check((await post(x)).status === 201, 'fam6\'s moment before the tablet is back')
    const missed = posts.filter((m) => m.author === p && expected.get(y).has(m.id) && !y.groups.get(p.id).plain.has(m.id))
    for (const m of missed) expected.get(y).delete(m.id)
    y.offline = false
    await y.syncAll()
    check(y.stats.rejoined === 1 && y.stats.refused.log_pruned === 1,
      `the tablet back after its log was pruned joined again ${y.stats.rejoined} times after ${y.stats.refused.log_pruned} 410s, want 1 and 1`)
    await x.sync(p.id)
    check(x.authenticator(p.id) === y.authenticator(p.id), 'the phone and the tablet joined again disagree on fam6\'s group')
    const res = await post(x)
    check(res.status === 201, `fam6's moment after the tablet joined again: ${res.status}`)
    await syncEveryone()
    const rejoined = phones.reduce((n, z) => n + z.stats.rejoined, 0)
    check(rejoined === 1, `${rejoined} clients joined again, want the tablet alone`)
    const got = y.groups.get(p.id).plain.get(res.body.id)
    check(got === posts[posts.length - 1].text, `the tablet joined again read ${got} of fam6's new moment`)
    for (const m of missed) check(!y.groups.get(p.id).plain.has(m.id), `the tablet read ${m.text}, of an epoch it missed`)
    return { rejoined: y.stats.rejoined, missed: missed.length, reads: verifyReading() }
  },

  // burst: phones post in turn, and each person's first phone commits to
  // its group every third turn, one acknowledgement line each, until the
  // server is gone (the test kills it in the middle) or 300 turns. A
  // commit acknowledged and lost shows in the next post step (409
  // stale_epoch), a moment in the acked step.
  async burst () {
    await syncEveryone()
    acked = []
    const live = phones.filter((x) => !x.offline)
    let failed = 0
    let commits = 0
    for (let i = 0; i < 300 && failed < 3; i++) {
      const x = live[i % live.length]
      const commit = i % 3 === 0 && phonesOf(x.person)[0] === x
      let res
      try {
        await x.sync(x.person.id)
        res = commit ? await x.commit(x.person.id) : await post(x)
      } catch { failed++; continue }
      check(res.status === 201, `burst: ${res.status} ${JSON.stringify(res.body)}`)
      if (commit) commits++
      else acked.push(posts[posts.length - 1])
      process.stdout.write(JSON.stringify({ event: 'acked', n: acked.length + commits, commit }) + '\n')
    }
    return { acked: acked.length, commits, failed }
  },

  // acked: every moment acknowledged in the burst is on the restarted server.
  async acked () {
    for (const p of people) {
      const ids = new Set((await p.moments(p.id)).map((m) => m.id))
      for (const m of acked) check(m.author !== p || ids.has(m.id), `acknowledged moment ${m.text} (${m.id}) lost`)
    }
    return { acked: acked.length }
  },

  // audit: each admitted phone audits its person's key log and each
  // connection's; the failures, each naming its person, are the answer.
  async audit () {
    const failures = []
    let audits = 0
    for (const x of phones) {
      if (!x.admitted) continue
      for (const p of people) {
        if (p !== x.person && !connected.has(key(p, x.person))) continue
        try { await x.audit(p); audits++ } catch (e) { failures.push(`${x.person.handle}/${x.name}: ${e.message}`) }
      }
    }
    return { audits, failures }
  },

  // people: the handles and ids, for the test that plants a key in a file.
  async people () { return { people: people.map((p) => ({ handle: p.handle, id: p.id })) } },

  async figures () {
    const owners = people.map((p) => phonesOf(p)[0])
    const refusals = {}
    for (const x of phones) for (const [c, k] of Object.entries(x.stats.refused)) refusals[c] = (refusals[c] || 0) + k
    return {
      people: people.length,
      clients: phones.length,
      groups: owners.length,
      epochs: owners.reduce((s, x) => s + Number(x.epoch(x.person.id)), 0),
      commits: phones.reduce((s, x) => s + x.stats.commits, 0),
      moments: posts.length,
      decrypted: phones.reduce((s, x) => s + x.stats.decrypted, 0),
      refusals,
    }
  },
}

const rl = createInterface({ input: process.stdin })
for await (const line of rl) {
  const { step, base } = JSON.parse(line)
  if (base) server.base = base
  const t0 = Date.now()
  let out
  failed = []
  try {
    out = { step, ok: true, ...(await steps[step]()) }
    if (failed.length) out = { step, error: failed.join('\n') }
  } catch (e) {
    out = { step, error: [...failed, String(e && e.stack ? e.stack : e)].join('\n') }
  }
  out.ms = Date.now() - t0
  process.stdout.write(JSON.stringify(out) + '\n')
}
