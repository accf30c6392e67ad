// campaign-bench ledger: a synthetic send ledger for `make bench`: the
// devices of `campaign-bench audience --rows N --seed S` (the same tokens),
// each reached by K campaigns of one scope, one campaign a day (the newest an
// hour ago), one segment per campaign, as K sends would have left it.

import Foundation
import CampaignIO
import SendLedger

func writeLedger(_ args: ArraySlice<String>) throws {
    var devices = 1_000_000, campaigns = 30, seed: UInt64 = 42, out = "ledger", scope = "marketing", touch = false
    parseOptions(args) { name, value in
        switch name {
        case "--devices": devices = Int(value())!
        case "--campaigns": campaigns = Int(value())!
        case "--seed": seed = UInt64(value())!
        case "--out": out = value()
        case "--scope": scope = value()
        case "--touch": touch = true
        default: fatalError("unknown option \(name)")
        }
    }
    // The audience generator's tokens: 4 draws per row, then 5 for the row's other fields.
    var rng = SplitMix64(seed: seed)
    var hashes = [UInt64](repeating: 0, count: devices)
    var token = [UInt8](repeating: 0, count: 32)
    for i in 0..<devices {
        for w in 0..<4 { withUnsafeBytes(of: rng.next().bigEndian) { for j in 0..<8 { token[w * 8 + j] = $0[j] } } }
        for _ in 0..<5 { _ = rng.next() }
        hashes[i] = LedgerFormat.tokenHash(token)
    }
    let now = UInt32(time(nil))
    let started = Date()
    for k in 0..<campaigns {
        let name = "bench-\(k)"
        let file = "bench-\(String(format: "%016x", k)).seg"
        let writer = try LedgerSegmentWriter(directory: out, name: file, campaign: name, scope: scope)
        let at = now - 3600 - UInt32(campaigns - 1 - k) * 86_400
        try writer.append(hashes: hashes, seconds: at)
        // As a send leaves it: the segment's time is its last entry's (--touch: now, as if every one were recent).
        if !touch { setModificationTime("\(out)/\(file)", seconds: at + 1) }
    }
    let entries = devices * campaigns
    print("{\"devices\":\(devices),\"campaigns\":\(campaigns),\"entries\":\(entries),\"bytes_per_entry\":\(LedgerFormat.entryBytes),\"seconds\":\(String(format: "%.3f", Date().timeIntervalSince(started)))}")
}
