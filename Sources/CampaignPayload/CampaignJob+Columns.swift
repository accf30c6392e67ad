import AudienceIngest

/// Which audience columns a job reads, and which message a device's language picks.
extension CampaignJob {
    /// Every name a mapping may map: the token, language and registration
    /// columns, and the variables of the messages, custom keys and collapseId.
    public var mappableNames: [String] {
        var names = broadcast ? ColumnMapping.channelReservedNames : ColumnMapping.reservedNames
        for v in PayloadRenderer(job: self, now: 0).variables + (collapseTemplate?.variables ?? []) where !names.contains(v) { names.append(v) }
        return names
    }

    /// Refuses a mapping of a name the job does not use (a typo would
    /// otherwise leave every row without the value); `origin` says where it came from.
    public func check(_ mapping: ColumnMapping, origin: String) throws(JobError) {
        let names = mappableNames
        for ours in mapping.sources.keys.sorted() where !names.contains(ours) {
            throw JobError(path: origin, reason: .unmappedName(ours, mappable: names))
        }
    }

    /// The message selector for device languages.
    public var selector: MessageSelector {
        MessageSelector(tags: messages.map { LanguageTag($0.tag)! }, fallback: fallback.compactMap { LanguageTag($0) },
                        fallbackByLanguage: fallbackByLanguage.mapValues { $0.compactMap { LanguageTag($0) } })
    }
}
