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
        let parts = t.lowercased().split(whereSeparator: { $0 == "-" || $0 == "_" }).map(String.init)
        guard let first = parts.first, !first.isEmpty, first != "c", first != "posix" else { return nil }
        language = first
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

extension Substring {
    func trimmingWhitespace() -> Substring {
        var s = self
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return s
    }
}

/// Chooses the job's message for a device language: the exact tag, then
/// language and script, then the language alone, then another message of the
/// same language (a pt-PT device gets pt-BR rather than English), then the
/// job's fallback chain. A missing or empty language goes to the fallback.
public struct MessageSelector: Sendable {
    /// The job's message tags, in job order.
    public let tags: [LanguageTag]
    public let fallback: [LanguageTag]

    public init(tags: [LanguageTag], fallback: [LanguageTag]) {
        self.tags = tags
        self.fallback = fallback
    }

    /// The index of the chosen message, or nil when neither the language nor the fallback has one.
    public func select(_ device: LanguageTag?) -> Int? {
        if let device, let i = match(device) { return i }
        for tag in fallback {
            if let i = match(tag) { return i }
        }
        return nil
    }

    func match(_ device: LanguageTag) -> Int? {
        if let i = tags.firstIndex(where: { $0.normalized == device.normalized }) { return i }
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
