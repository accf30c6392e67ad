import CampaignIO
import CampaignJSON
import CampaignRules

/// One of a job's `variants`: a share of the audience that gets its own
/// messages, or (a holdout) nothing at all.
public struct JobVariant: Equatable, Sendable {
    public var name: String
    /// A positive whole number; the variant's share is weight / the weights' total.
    public var weight: Int
    /// A control group: planned into `PLAN.holdout.ndjson`, never sent.
    public var holdout: Bool
    /// The variant's messages in the job's ``CampaignJob/messages`` (empty for a holdout).
    public var messages: Range<Int>

    public init(name: String, weight: Int, holdout: Bool, messages: Range<Int>) {
        (self.name, self.weight, self.holdout, self.messages) = (name, weight, holdout, messages)
    }
}

extension CampaignJob {
    /// The variant assigner of a job with variants; nil without.
    public var variantAssigner: VariantAssigner? {
        variants.isEmpty ? nil : VariantAssigner(campaign: campaign, weights: variants.map(\.weight))
    }

    /// The message selector of one variant (indices within the variant's messages).
    public func selector(ofVariant v: Int) -> MessageSelector {
        let tags = job(ofVariant: v).map { LanguageTag($0.tag)! }
        return MessageSelector(tags: tags, fallback: fallback.compactMap { LanguageTag($0) },
                               fallbackByLanguage: fallbackByLanguage.mapValues { $0.compactMap { LanguageTag($0) } })
    }

    private func job(ofVariant v: Int) -> ArraySlice<(tag: String, aps: [(key: String, value: JSONValue)])> {
        messages[variants[v].messages]
    }

    /// A job with `variants`: each variant with messages is checked as the
    /// job with those messages would be (every rule of tags, fallback, push
    /// type and templates), and the job's messages are theirs one after another.
    init(variantsJSON json: JSONValue, path: String) throws(JobError) {
        func fail(_ rule: String) -> JobError { JobError(path: path, reason: .brokenRule(rule)) }
        if json["messages"] != nil {
            throw fail("\"messages\" goes inside each of \"variants\": a job with variants has no messages of its own")
        }
        if json["broadcast"] == .bool(true) {
            throw fail("\"variants\" cannot go with \"broadcast\": a channel's subscribers cannot be split between variants")
        }
        guard case .array(let items)? = json["variants"], items.count >= 2 else {
            throw fail("\"variants\" must be an array of at least two variants, e.g. [{\"name\": \"A\", \"weight\": 50, \"messages\": {…}}, {\"name\": \"control\", \"weight\": 10, \"holdout\": true}]")
        }
        guard items.count <= 255 else { throw fail("\"variants\" may hold at most 255 variants") }
        guard var members = json.objectMembers else { throw JobError(path: path, reason: .notAnObject) }
        // Columns are checked once, over every variant's variables (a mapping may name any variant's).
        members.removeAll { $0.key == "variants" || $0.key == "columns" }
        // The job's own fields are checked once, before any variant's
        // messages: a rule they break is the job's, not the first variant's.
        do { _ = try CampaignJob(json: .object(members + [("messages", .object([]))]), path: path) } catch {
            guard case .brokenRule(let sentence) = error.reason, sentence == CampaignJob.noMessagesRule else { throw error }
        }
        var base: CampaignJob? = nil
        var all: [(tag: String, aps: [(key: String, value: JSONValue)])] = []
        var variants: [JobVariant] = []
        var names = Set<String>()
        for (i, item) in items.enumerated() {
            let at = "variants[\(i)]"
            guard let fields = item.objectMembers else { throw fail("\(at) must be an object with \"name\", \"weight\" and \"messages\" (or \"holdout\": true)") }
            for (key, _) in fields where !["name", "weight", "messages", "holdout"].contains(key) {
                throw fail("\(at): unknown key \"\(key)\" (known: holdout, messages, name, weight)")
            }
            guard let name = item["name"]?.stringValue, !name.isEmpty, name.utf8.count <= 64,
                  name.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0) }) else {
                throw fail("\(at).name must be 1 to 64 letters, digits, '.', '_' or '-'")
            }
            guard names.insert(name).inserted else { throw fail("\(at).name \"\(name)\" names another variant too: names must be unique") }
            guard let w = item["weight"]?.integerValue, w >= 1, w <= 1_000_000 else {
                throw fail("\(at).weight must be a whole number from 1 to 1000000 (its share is weight / the weights' total)")
            }
            let holdout: Bool
            switch item["holdout"] {
            case nil: holdout = false
            case .bool(let b)?: holdout = b
            case let other?: throw fail("\(at).holdout must be true or false, not \(other.typeName)")
            }
            if holdout {
                guard item["messages"] == nil else { throw fail("\(at) is a holdout: it gets nothing, so it has no \"messages\"") }
                variants.append(JobVariant(name: name, weight: Int(w), holdout: true, messages: all.count..<all.count))
                continue
            }
            guard let messages = item["messages"] else { throw fail("\(at).messages is missing (or give the variant \"holdout\": true)") }
            let job: CampaignJob
            do {
                job = try CampaignJob(json: .object(members + [("messages", messages)]), path: path)
            } catch {
                guard case .brokenRule(let sentence) = error.reason else { throw error }
                throw fail("\(at) (\"\(name)\"): \(sentence)")
            }
            if base == nil { base = job }
            variants.append(JobVariant(name: name, weight: Int(w), holdout: false, messages: all.count..<(all.count + job.messages.count)))
            all += job.messages
        }
        guard var job = base else { throw fail("\"variants\" must have at least one variant with messages (every one is a holdout)") }
        job.messages = all
        job.variants = variants
        switch json["columns"] {
        case nil: break
        case .object(let members)?:
            for (ours, source) in members {
                guard let text = source.stringValue, !text.isEmpty else { throw fail("columns.\(ours) must name a column of the export (a string)") }
                job.columns.sources[ours] = text
            }
        case let other?: throw fail("\"columns\" must be an object from our names to the export's columns, not \(other.typeName)")
        }
        try job.check(job.columns, origin: "\(path): columns")
        self = job
    }
}
