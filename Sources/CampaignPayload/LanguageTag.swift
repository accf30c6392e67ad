import CampaignIO

/// A language tag, normalized: BCP 47 (`es-MX`, `zh-Hant-TW`) or POSIX
/// (`es_MX.UTF-8`, `sr_RS@latin`), compared without regard to case or to `_`
/// versus `-`.
public struct LanguageTag: Hashable, Sendable, CustomStringConvertible {
    /// Lower-case subtags joined by "-", e.g. "zh-hant-tw".
    public let normalized: String
    public let language: String
    public let script: String?
    public let region: String?

    /// Nil for an empty or blank tag.
    public init?(_ text: some StringProtocol) {
        var t = Substring(text).trimmingWhitespace()
        if let dot = t.firstIndex(of: ".") { t = t[..<dot] }   // POSIX codeset
        if let at = t.firstIndex(of: "@") { t = t[..<at] }     // POSIX modifier
        var parts = t.lowercased().split(whereSeparator: { $0 == "-" || $0 == "_" }).map(String.init)
        guard let first = parts.first, !first.isEmpty, first != "c", first != "posix" else { return nil }
        // Codes ISO 639 withdrew, which old devices and databases still send.
        if let current = Self.deprecatedLanguages[first] { parts[0] = current }
        language = parts[0]
        var script: String? = nil
        var region: String? = nil
        for part in parts.dropFirst() {
            if script == nil, region == nil, part.count == 4, part.allSatisfy(\.isLetter) {
                script = part
            } else if region == nil, (part.count == 2 && part.allSatisfy(\.isLetter)) || (part.count == 3 && part.allSatisfy(\.isNumber)) {
                region = part
            }
        }
        self.script = script
        self.region = region
        normalized = parts.joined(separator: "-")
    }

    /// Withdrawn ISO 639 codes and their replacements (IANA's registry
    /// marks them deprecated: Hebrew, Indonesian, Yiddish, Javanese, Romanian).
    static let deprecatedLanguages = ["iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro"]

    /// The tag and the tags RFC 4647 lookup tries after it, longest first:
    /// each drops the last subtag (and a single-letter extension marker left
    /// at the end), so `en-gb-oxendict` tries `en-gb`, then `en`.
    public var lookupChain: [String] {
        var parts = normalized.split(separator: "-").map(String.init)
        var chain: [String] = []
        while !parts.isEmpty {
            chain.append(parts.joined(separator: "-"))
            parts.removeLast()
            if parts.count > 1, parts.last?.count == 1 { parts.removeLast() }
        }
        return chain
    }

    /// The script a region implies where it matters for choosing a message:
    /// Chinese in Taiwan, Hong Kong and Macau is written in Traditional characters.
    public var likelyScript: String? {
        if let script { return script }
        guard language == "zh" else { return nil }
        switch region {
        case "tw", "hk", "mo": return "hant"
        case "cn", "sg", "my": return "hans"
        default: return nil
        }
    }

    public var description: String { normalized }
}

/// Chooses the job's message for a device language: the exact tag and its
/// RFC 4647 lookup prefixes, then language and region, then language and
/// script, then the language alone, then another message of the
/// same language (a pt-PT device gets pt-BR rather than English), then the
/// job's fallback chain. A missing or empty language goes to the fallback.
public struct MessageSelector: Sendable {
    /// The job's message tags, in job order.
    public let tags: [LanguageTag]
    /// The chain for every language without one of its own.
    public let fallback: [LanguageTag]
    /// Chains of their own, by normalized language tag (`pt`, `pt-br`).
    public let fallbackByLanguage: [String: [LanguageTag]]

    public init(tags: [LanguageTag], fallback: [LanguageTag], fallbackByLanguage: [String: [LanguageTag]] = [:]) {
        self.tags = tags
        self.fallback = fallback
        self.fallbackByLanguage = fallbackByLanguage
    }

    /// The fallback chain for `device`: its own (the most specific tag that
    /// has one: `pt-BR`, then `pt`), or the chain for every other language.
    public func chain(for device: LanguageTag?) -> [LanguageTag] {
        if let device, !fallbackByLanguage.isEmpty {
            for candidate in device.lookupChain { if let chain = fallbackByLanguage[candidate] { return chain } }
        }
        return fallback
    }

    /// The index of the chosen message, or nil when neither the language nor its fallback chain has one.
    public func select(_ device: LanguageTag?) -> Int? {
        if let device, let i = match(device) { return i }
        for tag in chain(for: device) {
            if let i = match(tag) { return i }
        }
        return nil
    }

    func match(_ device: LanguageTag) -> Int? {
        // RFC 4647 lookup: the tag, then shorter and shorter prefixes of it,
        // down to (not including) the bare language, which comes later.
        for candidate in device.lookupChain.dropLast() {
            if let i = tags.firstIndex(where: { $0.normalized == candidate }) { return i }
        }
        // The same language and region, whatever else the tags hold
        // (`en-Latn-GB` or `en-GB-oxendict` → `en-GB`), if their scripts agree.
        if let region = device.region, let i = tags.firstIndex(where: {
            $0.language == device.language && $0.region == region
                && ($0.likelyScript == nil || device.likelyScript == nil || $0.likelyScript == device.likelyScript)
        }) { return i }
        if let script = device.likelyScript {
            let wanted = "\(device.language)-\(script)"
            if let i = tags.firstIndex(where: { $0.normalized == wanted }) { return i }
        }
        if let i = tags.firstIndex(where: { $0.normalized == device.language }) { return i }
        if let script = device.likelyScript,
           let i = tags.firstIndex(where: { $0.language == device.language && $0.likelyScript == script }) {
            return i
        }
        return tags.firstIndex { $0.language == device.language }
    }
}
