// Synthetic audiences: N rows in a realistic mix of languages and name
// lengths, some multi-byte text, unique random tokens; with --bad-every K,
// every Kth row is broken in one of several ways (each a documented reject).

import Foundation
import CampaignIO

struct AudienceOptions {
    var rows = 1_000_000
    var csv = true
    var seed: UInt64 = 42
    var badEvery = 0
    /// A `tz` column (CSV only): zones of a worldwide app, for scheduled jobs.
    var timeZones = false

    init(_ args: ArraySlice<String>) {
        parseOptions(args) { name, value in
            switch name {
            case "--rows": rows = Int(value())!
            case "--format": csv = value() == "csv"
            case "--seed": seed = UInt64(value())!
            case "--bad-every": badEvery = Int(value())!
            case "--time-zones": timeZones = true
            default: fatalError("unknown option \(name)")
            }
        }
    }
}

extension SplitMix64 {
    mutating func pick<T>(_ items: [T]) -> T { items[Int(next() % UInt64(items.count))] }
}

/// Weighted like a real app's audience: mostly English and Spanish.
let languages: [String] = Array(repeating: "en-US", count: 30) + Array(repeating: "en-GB", count: 6)
    + Array(repeating: "es-ES", count: 10) + Array(repeating: "es-MX", count: 10) + Array(repeating: "pt-BR", count: 10)
    + Array(repeating: "pt-PT", count: 3) + Array(repeating: "fr-FR", count: 8) + Array(repeating: "de-DE", count: 7)
    + Array(repeating: "ja-JP", count: 5) + Array(repeating: "zh-Hant-TW", count: 3) + ["it-IT", "nl_NL.UTF-8", "ko", "", "ru-RU"]

let firstNames = ["Ana", "José", "Mia", "Noah", "Zoë", "João", "Élodie", "Jürgen", "Sakura", "陳美玲", "Oliver", "Sofía",
                  "Maximilian-Alexander", "Aiyana", "Liam", "Emma", "Chiara", "Bartholomew", "Ngozi", "Đặng", "Åsa", "O'Brien"]

/// Zones weighted like a worldwide app's users: IANA names, some fixed offsets, an unknown one, some empty.
let timeZones: [String] = Array(repeating: "America/New_York", count: 12) + Array(repeating: "America/Los_Angeles", count: 8)
    + Array(repeating: "America/Mexico_City", count: 6) + Array(repeating: "America/Sao_Paulo", count: 8) + Array(repeating: "Europe/Berlin", count: 8)
    + Array(repeating: "Europe/London", count: 6) + Array(repeating: "Europe/Madrid", count: 5) + Array(repeating: "Asia/Tokyo", count: 5)
    + Array(repeating: "Asia/Kolkata", count: 6) + ["Asia/Kathmandu", "Australia/Sydney", "Australia/Adelaide", "Pacific/Auckland", "Asia/Shanghai",
    "America/St_Johns", "Africa/Lagos", "+05:30", "UTC-3", "-00:01", "Mars/Olympus", "", "", ""]

func writeAudience(_ options: AudienceOptions) throws {
    var rng = SplitMix64(seed: options.seed)
    let out = FileHandle.standardOutput
    var buffer = ""
    buffer.reserveCapacity(1 << 20)
    if options.csv { buffer += "token,lang,first_name,discount,badge,registered_at" + (options.timeZones ? ",tz\n" : "\n") }
    for row in 1...max(1, options.rows) {
        var token = ""
        for _ in 0..<4 { token += String(format: "%016llx", rng.next()) }
        var lang = rng.pick(languages)
        var name = rng.pick(firstNames)
        let discount = String(5 * (1 + rng.next() % 10))
        var badge = String(rng.next() % 20)
        let registered = String(1_690_000_000 + rng.next() % 10_000_000)
        if options.badEvery > 0, row % options.badEvery == 0 {
            switch (row / options.badEvery) % 5 {
            case 0: token = String(token.dropLast(2))            // 31 bytes
            case 1: token = "not-a-token"
            case 2: badge = "many"                               // not a whole number
            case 3: name = ""                                    // missing variable
            default: lang = "en\",broken"                       // stray quote: malformed CSV
            }
        }
        if options.csv {
            let quotedName = name.contains(",") || name.contains("\"") ? "\"\(name.replacingOccurrences(of: "\"", with: "\"\""))\"" : name
            buffer += "\(token),\(lang),\(quotedName),\(discount),\(badge),\(registered)" + (options.timeZones ? ",\(rng.pick(timeZones))\n" : "\n")
        } else {
            let escapedName = name.replacingOccurrences(of: "\"", with: "\\\"")
            let escapedLang = lang.replacingOccurrences(of: "\"", with: "\\\"")
            buffer += "{\"token\":\"\(token)\",\"lang\":\"\(escapedLang)\",\"first_name\":\"\(escapedName)\",\"discount\":\(discount),\"badge\":\"\(badge)\",\"registered_at\":\(registered)}\n"
        }
        if buffer.utf8.count > 1 << 20 {
            out.write(Data(buffer.utf8))
            buffer.removeAll(keepingCapacity: true)
        }
    }
    out.write(Data(buffer.utf8))
}
