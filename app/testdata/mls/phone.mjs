// What a phone app built on nah does with ts-mls (RFC 9420), as docs/api.md's
// MLS section describes: one Phone is one MLS client of a person. It
// registers its signature key, uploads KeyPackages, creates its person's
// group, adds the clients nah says are waiting (claiming their KeyPackages,
// with a Welcome), removes the ones a disconnect left pending, joins groups
// from its inbox, follows each group's commit log (joining again from the
// GroupInfo when nah says the commits it needs are pruned), posts moments
// as PrivateMessages and decrypts the feed, and audits people's key logs.
import { createHash, createPublicKey, verify } from 'node:crypto'
import * as mls from 'ts-mls'
import { makeKeyPackageRef } from 'ts-mls/keyPackage.js'

export const suite = await mls.getCiphersuiteImpl(
  mls.getCiphersuiteFromName('MLS_128_DHKEMX25519_AES128GCM_SHA256_Ed25519'))

const utf8 = new TextEncoder()
const text = new TextDecoder()
const b64 = (u8) => Buffer.from(u8).toString('base64')
const unb64 = (s) => new Uint8Array(Buffer.from(s, 'base64'))
const hex = (u8) => Buffer.from(u8).toString('hex')

// HTTPError is an answer the phone did not expect: status and error code.
export class HTTPError extends Error {
  constructor (method, path, status, body) {
    const code = body && body.error ? body.error.code : ''
    super(`${method} ${path}: ${status} ${code} ${JSON.stringify(body)}`)
    this.status = status
    this.code = code
    this.body = body
  }
}

export class Server {
  constructor (base) { this.base = base }

  // call answers {status, body}; want (a status or a list) makes any other
  // status an HTTPError.
  async call (method, path, token, body, want) {
    const headers = {}
    if (token) headers.Authorization = `Bearer ${token}`
    if (body !== undefined) headers['Content-Type'] = 'application/json'
    const res = await fetch(this.base + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    })
    const raw = await res.text()
    let json = null
    try { json = raw ? JSON.parse(raw) : null } catch { json = { raw } }
    if (want !== undefined && ![want].flat().includes(res.status)) {
      throw new HTTPError(method, path, res.status, json)
    }
    return { status: res.status, body: json }
  }
}

// Person is an account: its handle, id and session, and the clients its
// phones registered (a real app learns those from its own group; the
// phones of one person share this object instead).
export class Person {
  constructor (server, handle) {
    this.server = server
    this.handle = handle
    this.registered = new Set()
  }

  call (method, path, body, want) { return this.server.call(method, path, this.token, body, want) }

  async signup () {
    const { body } = await this.server.call('POST', '/api/v1/accounts', '',
      { handle: this.handle, password: `password-${this.handle}` }, 201)
    this.id = body.person.id
    this.token = body.token
  }

  async connect (other) {
    const { body } = await other.call('POST', '/api/v1/invites', undefined, 201)
    await this.call('POST', '/api/v1/connections', { code: body.code }, 201)
  }

  async disconnect (other) {
    await this.call('DELETE', `/api/v1/connections/${other.id}`, undefined, 204)
  }

  // moments lists every moment of person id, oldest first (null when the
  // person is not, or no longer, a connection).
  async moments (id) {
    const all = []
    let next = ''
    for (;;) {
      const { status, body } = await this.call('GET', `/api/v1/people/${id}/moments?limit=100` +
        (next ? `&before=${encodeURIComponent(next)}` : ''), undefined, [200, 404])
      if (status === 404) return null // no longer connected
      all.push(...body.moments)
      if (!body.next) return all.reverse()
      next = body.next
    }
  }
}

// entryBytes is a key log entry as its hash covers it (store.KeyLogEntryBytes):
// kind (1 added, 2 removed), the client id after a 1-byte length, the
// signature key after a 2-byte big-endian length, the time in unix ms
// (8 bytes big-endian).
function entryBytes (e) {
  const client = Buffer.from(e.client)
  const key = Buffer.from(e.signature_key, 'base64')
  const b = Buffer.alloc(1 + 1 + client.length + 2 + key.length + 8)
  let o = b.writeUInt8(e.kind === 'client_removed' ? 2 : 1, 0)
  o = b.writeUInt8(client.length, o)
  o += client.copy(b, o)
  o = b.writeUInt16BE(key.length, o)
  o += key.copy(b, o)
  b.writeBigUInt64BE(BigInt(Date.parse(e.at)), o)
  return b
}

const groupID = (personID) => utf8.encode(`nah:${personID}`)

export class Phone {
  constructor (person, name) {
    this.person = person
    this.name = name
    this.keyPackages = new Map() // KeyPackageRef (hex) → {publicPackage, privatePackage}
    this.groups = new Map() // owner id → Group
    this.sent = new Map() // body (b64) → plaintext: a phone cannot decrypt its own messages
    this.pins = new Map() // person id → {size, hash}: the key log heads this phone saw
    this.serverKey = null // the server's key log key, pinned at the first audit
    this.stats = { decrypted: 0, commits: 0, rejoined: 0, refused: {} }
    this.people = new Map() // person id → Person, for names in audit failures
  }

  call (method, path, body, want) { return this.person.call(method, path, body, want) }
  refused (code) { this.stats.refused[code] = (this.stats.refused[code] || 0) + 1 }

  async register () {
    this.sig = await suite.signature.keygen()
    const { body } = await this.call('POST', '/api/v1/me/clients',
      { signature_key: b64(this.sig.publicKey), name: this.name }, 201)
    this.id = body.id
    this.person.registered.add(this.id)
    this.credential = { credentialType: 'basic', identity: utf8.encode(this.id) }
  }

  async newKeyPackage () {
    const kp = await mls.generateKeyPackageWithKey(this.credential, mls.defaultCapabilities(),
      mls.defaultLifetime, [], this.sig, suite)
    this.keyPackages.set(hex(await makeKeyPackageRef(kp.publicPackage, suite.hash)), kp)
    return kp
  }

  async uploadKeyPackages (n) {
    const enc = async () => b64(mls.encodeMlsMessage({
      version: 'mls10', wireformat: 'mls_key_package', keyPackage: (await this.newKeyPackage()).publicPackage,
    }))
    const kps = []
    for (let i = 0; i < n; i++) kps.push(await enc())
    const { body } = await this.call('POST', `/api/v1/me/clients/${this.id}/key_packages`,
      { key_packages: kps, last_resort: await enc() }, 200)
    return body
  }

  // createGroup makes the person's group at epoch 0 with this phone at leaf 0.
  async createGroup () {
    const kp = await this.newKeyPackage()
    const state = await mls.createGroup(groupID(this.person.id), kp.publicPackage, kp.privatePackage, [], suite)
    await this.call('POST', `/api/v1/people/${this.person.id}/group`,
      { client: this.id, group_id: b64(groupID(this.person.id)) }, 201)
    this.groups.set(this.person.id, { state, joined: 0n, seen: new Set(), plain: new Map() })
  }

  epoch (owner) { return this.groups.get(owner).state.groupContext.epoch }

  // members maps client id → leaf index in this phone's view of owner's group.
  members (owner) {
    const out = new Map()
    this.groups.get(owner).state.ratchetTree.forEach((n, i) => {
      if (n && n.nodeType === 'leaf') out.set(text.decode(n.leaf.credential.identity), i / 2)
    })
    return out
  }

  // commit sends one commit to owner's group: Adds for keyPackages, Removes
  // for leaves (none: an empty commit, a fresh path). It answers the status
  // and applies the new state only when nah took it.
  async commit (owner, { keyPackages = [], removes = [] } = {}) {
    const g = this.groups.get(owner)
    const proposals = [
      ...removes.map((removed) => ({ proposalType: 'remove', remove: { removed } })),
      ...keyPackages.map((keyPackage) => ({ proposalType: 'add', add: { keyPackage } })),
    ]
    const r = await mls.createCommit({ state: g.state, cipherSuite: suite },
      { wireAsPublicMessage: true, ratchetTreeExtension: true, extraProposals: proposals })
    const body = { commit: b64(mls.encodeMlsMessage(r.commit)) }
    if (r.welcome) body.welcome = b64(mls.encodeMlsMessage({ version: 'mls10', wireformat: 'mls_welcome', welcome: r.welcome }))
    const gi = await mls.createGroupInfoWithExternalPubAndRatchetTree(r.newState, [], suite)
    body.group_info = b64(mls.encodeMlsMessage({ version: 'mls10', wireformat: 'mls_group_info', groupInfo: gi }))
    // A commit whose answer was lost may stand: sync applies its state when
    // it finds the same bytes in the log.
    g.unsure = { commit: body.commit, state: r.newState }
    const res = await this.call('POST', `/api/v1/people/${owner}/group/commits`, body)
    g.unsure = null
    if (res.status === 201) {
      g.state = r.newState
      this.stats.commits++
    } else if (res.body && res.body.error) {
      this.refused(res.body.error.code)
    }
    return res
  }

  // tend is what the phone does for a group it can commit to when it comes
  // online: remove the leaves nah says are pending removal and add the
  // clients it says are waiting, each KeyPackage signed with the key its
  // person's audited key log holds, in one commit (retried after catching up
  // when another client committed first). It answers how many it added
  // and removed.
  async tend (owner) {
    for (let attempt = 0; attempt < 5; attempt++) {
      await this.sync(owner)
      const { body: g } = await this.call('GET', `/api/v1/people/${owner}/group`, undefined, 200)
      const leaves = this.members(owner)
      const removes = g.pending_removals.filter((c) => leaves.has(c)).map((c) => leaves.get(c))
      const waiting = new Set(g.waiting.filter((c) => !leaves.has(c)))
      const keyPackages = []
      if (waiting.size) {
        // The waiting are clients of the owner or of a connection.
        const { body: conns } = await this.call('GET', '/api/v1/connections', undefined, 200)
        for (const p of [owner, ...conns.connections.map((c) => c.id)]) {
          const { body: list } = await this.call('GET', `/api/v1/people/${p}/clients`, undefined, 200)
          if (!list.clients.some((c) => waiting.has(c.id))) continue
          const keys = await this.audit(this.people.get(p) || { id: p, handle: p })
          const { body: claimed } = await this.call('POST', `/api/v1/people/${p}/key_packages/claim`, undefined, 200)
          for (const kp of claimed.key_packages) {
            if (!waiting.has(kp.client)) continue
            const msg = mls.decodeMlsMessage(unb64(kp.key_package), 0)[0]
            if (msg.wireformat !== 'mls_key_package') throw new Error(`claimed a ${msg.wireformat} for ${kp.client}`)
            if (text.decode(msg.keyPackage.leafNode.credential.identity) !== kp.client) {
              throw new Error(`the KeyPackage claimed for ${kp.client} names another client`)
            }
            if (keys.get(kp.client) !== b64(msg.keyPackage.leafNode.signaturePublicKey)) {
              throw new Error(`the KeyPackage claimed for ${kp.client} is signed with a key its person's log does not have`)
            }
            keyPackages.push(msg.keyPackage)
            waiting.delete(kp.client)
          }
        }
      }
      if (!removes.length && !keyPackages.length) return { added: 0, removed: 0 }
      const res = await this.commit(owner, { keyPackages, removes })
      if (res.status === 201) return { added: keyPackages.length, removed: removes.length }
      if (res.status !== 409) throw new HTTPError('POST', `/people/${owner}/group/commits`, res.status, res.body)
    }
    throw new Error(`${this.name}: could not commit to ${owner}'s group in 5 tries`)
  }

  // inbox joins every group a Welcome in this client's inbox is for.
  async inbox () {
    const { body } = await this.call('GET', `/api/v1/me/clients/${this.id}/inbox`, undefined, 200)
    let joined = 0
    for (const w of body.welcomes) {
      const msg = mls.decodeMlsMessage(unb64(w.welcome), 0)[0]
      if (msg.wireformat !== 'mls_welcome') throw new Error(`inbox entry ${w.id} is a ${msg.wireformat}`)
      const ref = msg.welcome.secrets.map((s) => hex(s.newMember)).find((r) => this.keyPackages.has(r))
      if (!ref) throw new Error(`${this.name}: a Welcome for none of my KeyPackages`)
      const kp = this.keyPackages.get(ref)
      const state = await mls.joinGroup(msg.welcome, kp.publicPackage, kp.privatePackage, mls.emptyPskIndex, suite)
      const owner = text.decode(state.groupContext.groupId).replace(/^nah:/, '')
      if (owner !== w.group) throw new Error(`the Welcome listed for ${w.group} is for ${owner}'s group`)
      const old = this.groups.get(owner)
      this.groups.set(owner, {
        state, joined: state.groupContext.epoch, seen: old ? old.seen : new Set(), plain: old ? old.plain : new Map(),
      })
      await this.call('DELETE', `/api/v1/me/clients/${this.id}/inbox/${w.id}`, undefined, 204)
      joined++
    }
    return joined
  }

  // rejoin joins owner's group again from the GroupInfo nah holds, with an
  // external commit that removes this client's old leaf (RFC 9420
  // §12.4.3.2, resync) and sends the new epoch's GroupInfo: what a phone
  // does when nah answers 410 log_pruned. The moments of the epochs it
  // missed stay unreadable to it.
  async rejoin (owner, path) {
    const g = this.groups.get(owner)
    for (let attempt = 0; attempt < 5; attempt++) {
      const { body } = await this.call('GET', path, undefined, 200)
      const info = mls.decodeMlsMessage(unb64(body.group_info), 0)[0]
      if (info.wireformat !== 'mls_group_info') throw new Error(`${path} holds a ${info.wireformat}`)
      const kp = await this.newKeyPackage()
      const r = await mls.joinGroupExternal(info.groupInfo, kp.publicPackage, kp.privatePackage, true, suite)
      const gi = await mls.createGroupInfoWithExternalPubAndRatchetTree(r.newState, [], suite)
      const res = await this.call('POST', `/api/v1/people/${owner}/group/commits`, {
        commit: b64(mls.encodeMlsMessage({ version: 'mls10', wireformat: 'mls_public_message', publicMessage: r.publicMessage })),
        group_info: b64(mls.encodeMlsMessage({ version: 'mls10', wireformat: 'mls_group_info', groupInfo: gi })),
      })
      if (res.status === 201) {
        g.state = r.newState
        g.joined = r.newState.groupContext.epoch
        this.stats.rejoined++
        return
      }
      if (res.status !== 409) throw new HTTPError('POST', `/people/${owner}/group/commits`, res.status, res.body)
    }
    throw new Error(`${this.name}: could not join ${owner}'s group again in 5 tries`)
  }

  // sync follows owner's group: the commits after this phone's epoch and
  // the moments it has not seen, each moment decrypted in its own epoch
  // before the commit that ends it (so no old epoch's keys are needed).
  // Moments of epochs before the phone joined are not for it. It answers
  // what it decrypted and what it could not.
  async sync (owner) {
    const g = this.groups.get(owner)
    const commits = new Map()
    let after = g.state.groupContext.epoch
    for (let pages = 0; pages < 1000; pages++) {
      const res = await this.call('GET', `/api/v1/people/${owner}/group/commits?after=${after}&client=${this.id}`)
      if (res.status === 404 || res.status === 403) break // no longer a member: keep what it read
      if (res.status === 410 && res.body.error.code === 'log_pruned' && commits.size === 0) {
        this.refused('log_pruned')
        await this.rejoin(owner, res.body.group_info)
        after = g.state.groupContext.epoch
        continue
      }
      if (res.status !== 200) throw new HTTPError('GET', 'commits', res.status, res.body)
      for (const c of res.body.commits) {
        const msg = mls.decodeMlsMessage(unb64(c.commit), 0)[0]
        commits.set(msg.publicMessage.content.epoch, msg)
      }
      if (res.body.next === null || res.body.next === undefined) break
      after = BigInt(res.body.next)
    }
    const byEpoch = new Map()
    const moments = await this.person.moments(owner)
    if (moments) {
      for (const m of moments) {
        if (g.seen.has(m.id)) continue
        if (this.sent.has(m.body)) { // its own post, acknowledged or not
          g.seen.add(m.id)
          g.plain.set(m.id, this.sent.get(m.body))
          continue
        }
        const msg = mls.decodeMlsMessage(unb64(m.body), 0)[0]
        if (msg.wireformat !== 'mls_private_message') throw new Error(`moment ${m.id} is a ${msg.wireformat}`)
        const e = msg.privateMessage.epoch
        if (e < g.joined) { g.seen.add(m.id); continue }
        if (!byEpoch.has(e)) byEpoch.set(e, [])
        byEpoch.get(e).push({ id: m.id, msg })
      }
    }
    let decrypted = 0
    for (;;) {
      const e = g.state.groupContext.epoch
      for (const { id, msg } of byEpoch.get(e) || []) {
        const r = await mls.processMessage(msg, g.state, mls.emptyPskIndex, mls.acceptAll, suite)
        if (r.kind !== 'applicationMessage') throw new Error(`moment ${id} is not an application message`)
        g.state = r.newState
        g.plain.set(id, text.decode(r.message))
        g.seen.add(id)
        decrypted++
      }
      byEpoch.delete(e)
      const c = commits.get(e)
      if (!c) break
      if (g.unsure && g.unsure.commit === b64(mls.encodeMlsMessage(c))) {
        g.state = g.unsure.state
        g.unsure = null
        continue
      }
      const r = await mls.processMessage(c, g.state, mls.emptyPskIndex, mls.acceptAll, suite)
      g.state = r.newState
      if (g.state.groupActiveState.kind === 'removedFromGroup') break
    }
    this.stats.decrypted += decrypted
    return { decrypted, undecrypted: [...byEpoch.values()].flat().map((x) => x.id) }
  }

  async syncAll () {
    await this.inbox()
    const out = { decrypted: 0, undecrypted: [] }
    for (const owner of this.groups.keys()) {
      const r = await this.sync(owner)
      out.decrypted += r.decrypted
      out.undecrypted.push(...r.undecrypted)
    }
    return out
  }

  // post sends a moment to its person's group at the phone's epoch. It
  // answers nah's answer (a 409 is not thrown: the caller decides).
  async post (plaintext) {
    const g = this.groups.get(this.person.id)
    const r = await mls.createApplicationMessage(g.state, utf8.encode(plaintext), suite)
    g.state = r.newState
    const body = b64(mls.encodeMlsMessage({ version: 'mls10', wireformat: 'mls_private_message', privateMessage: r.privateMessage }))
    this.sent.set(body, plaintext)
    const res = await this.call('POST', '/api/v1/moments', { body })
    if (res.status === 201) {
      g.seen.add(res.body.id)
      g.plain.set(res.body.id, plaintext)
    } else if (res.body && res.body.error) {
      this.refused(res.body.error.code)
    }
    return res
  }

  // tryDecrypt opens a moment body with this phone's current view of
  // owner's group, without keeping the state: the plaintext, or null.
  async tryDecrypt (owner, body) {
    const g = this.groups.get(owner)
    try {
      const msg = mls.decodeMlsMessage(unb64(body), 0)[0]
      const r = await mls.processMessage(msg, g.state, mls.emptyPskIndex, mls.acceptAll, suite)
      return r.kind === 'applicationMessage' ? text.decode(r.message) : null
    } catch {
      return null
    }
  }

  // authenticator is the epoch authenticator of owner's group (RFC 9420
  // §8.7): two clients at one epoch agree on it exactly when they agree
  // on the group.
  authenticator (owner) { return hex(this.groups.get(owner).state.keySchedule.epochAuthenticator) }

  // audit checks person p's key log (a Person, for its handle in the
  // error): the hash chain recomputed from the first entry, the head's
  // signature under the server key this phone pinned at its first audit,
  // that the head it pinned before is a prefix of this one, that the
  // clients nah lists for p are exactly the log's live ones with the
  // log's keys, and, for the phone's own person, that every live client
  // is one its phones registered. A failure throws an error naming p;
  // else it answers the live clients, id → signature key (base64).
  async audit (p) {
    const fail = (why) => { throw new Error(`key log of ${p.handle} (${p.id}): ${why}`) }
    if (!this.serverKey) {
      const { body } = await this.call('GET', '/api/v1/key_log/key', undefined, 200)
      this.serverKey = body.public_key
    }
    const { body: log } = await this.call('GET', `/api/v1/people/${p.id}/key_log?after=0`, undefined, 200)
    let h = Buffer.alloc(32)
    const live = new Map()
    const pin = this.pins.get(p.id)
    log.entries.forEach((e, i) => {
      if (e.pos !== i + 1) fail(`entry ${i + 1} has pos ${e.pos}`)
      h = createHash('sha256').update(h).update(entryBytes(e)).digest()
      if (h.toString('hex') !== e.hash) fail(`entry ${e.pos}'s hash is not the chain's`)
      if (pin && e.pos === pin.size && e.hash !== pin.hash) fail(`the head pinned at ${pin.size} was rewritten`)
      if (e.kind === 'client_added') live.set(e.client, e.signature_key)
      else if (e.kind === 'client_removed') live.delete(e.client)
      else fail(`entry ${e.pos} is of kind ${e.kind}`)
    })
    const head = log.head
    if (head.size !== log.entries.length || head.hash !== h.toString('hex')) fail(`the head ${head.size} ${head.hash} is not the entries' chain`)
    if (pin && head.size < pin.size) fail(`the log shrank from ${pin.size} to ${head.size} entries`)
    const size = Buffer.alloc(8)
    size.writeBigUInt64BE(BigInt(head.size))
    const signed = Buffer.concat([Buffer.from(`nah key log v1${p.id}`), size, h])
    const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(this.serverKey, 'base64')])
    const key = createPublicKey({ key: spki, format: 'der', type: 'spki' })
    if (!verify(null, signed, key, Buffer.from(head.signature, 'base64'))) fail('the head\'s signature is not the server key\'s')
    const { body: list } = await this.call('GET', `/api/v1/people/${p.id}/clients`, undefined, 200)
    for (const c of list.clients) {
      if (live.get(c.id) !== c.signature_key) fail(`client ${c.id}'s key is not in the log`)
      live.delete(c.id)
    }
    if (live.size) fail(`the log's clients ${[...live.keys()]} are not listed`)
    if (p.id === this.person.id) {
      for (const c of list.clients) if (!p.registered.has(c.id)) fail(`client ${c.id} was not added by ${p.handle}'s phones`)
    }
    this.pins.set(p.id, { size: head.size, hash: head.hash })
    for (const c of list.clients) live.set(c.id, c.signature_key)
    return live
  }
}
