// One upload with tus-js-client, as a phone app built on it does:
//   node tusjs.mjs ENDPOINT TOKEN FILE OPTIONS_JSON
// OPTIONS_JSON is merged into tus.Upload's options (headers are added to
// the bearer token). Prints one JSON line: {"ok":true,"url","mediaId"} or
// {"ok":false,"status","error"}, the error as tus-js-client shows it.
import { readFileSync } from 'node:fs'
import { Upload } from 'tus-js-client'

const [endpoint, token, file, extra] = process.argv.slice(2)
const opts = JSON.parse(extra || 'null') || {}
const data = readFileSync(file)
const upload = new Upload(data, {
  endpoint,
  retryDelays: [0, 100, 200],
  metadata: { filename: 'clip.mp4', filetype: 'video/mp4' },
  ...opts,
  headers: { Authorization: `Bearer ${token}`, ...(opts.headers || {}) },
  onSuccess ({ lastResponse }) {
    console.log(JSON.stringify({ ok: true, url: upload.url, mediaId: lastResponse.getHeader('Media-Id') }))
  },
  onError (err) {
    const status = err.originalResponse ? err.originalResponse.getStatus() : 0
    console.log(JSON.stringify({ ok: false, status, error: String(err) }))
  },
})
upload.start()
