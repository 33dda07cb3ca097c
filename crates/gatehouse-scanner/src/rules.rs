//! The rule catalogue: signals matched on the normalized (lowercase) view.
//!
//! Signals are evidence, not verdicts. A directive (text aimed at the model)
//! and a target (a secret, a channel out, a dangerous action) are weighed
//! together in `engine.rs`; only standalone rules carry a severity of their
//! own. Pattern syntax: a literal space means `\s+`, `\b` is an ASCII word
//! boundary (so the lazy DFA can run), and everything is lowercase because the
//! view is.

use crate::{Family, Severity};

/// What a signal contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// "ignore previous instructions", mode switches (strongest directive).
    Override,
    /// Chat-template tokens, fake system/assistant turns, closing wrappers.
    FakeRole,
    /// Text explicitly addressed to the model/agent.
    Address,
    /// Hiding the action from the person, skipping consent.
    Conceal,
    /// `<IMPORTANT>`-style tags and their kin.
    Tag,
    /// Conditions on other tools or servers.
    CrossTool,
    /// A bare `TODO:` directive followed by an action.
    Todo,
    /// Clause-initial imperative verb (weak on its own).
    Imperative,
    /// Concrete credential locations and secret-dumping commands.
    Credential,
    /// The model's context: system prompt, conversation, other tools' output.
    Context,
    /// Dangerous shell: download-and-run, reverse shells, persistence.
    Shell,
    /// Path traversal and sensitive file URIs.
    Traversal,
    /// Data leaving: send/post/upload to a URL/address, image beacons.
    Exfil,
    /// Tool-call hijack: payments, deletions, sharing, output manipulation.
    Action,
    /// Secret nouns (password, token, API key): weak target.
    SecretNoun,
    /// Telling the model what to say or recommend.
    Manipulation,
    /// Fires alone with the given severity.
    Standalone(Severity),
}

impl Kind {
    pub fn directive_strength(self) -> u8 {
        match self {
            Kind::Override | Kind::FakeRole => 3,
            Kind::Address | Kind::Conceal | Kind::Tag | Kind::CrossTool | Kind::Todo => 2,
            Kind::Imperative => 1,
            _ => 0,
        }
    }

    /// 2 = strong target, 1 = channel/action, 0 = weak or none.
    pub fn target_strength(self) -> u8 {
        match self {
            Kind::Credential | Kind::Context | Kind::Shell | Kind::Traversal => 2,
            Kind::Exfil | Kind::Action => 1,
            _ => 0,
        }
    }

    pub fn is_target(self) -> bool {
        self.target_strength() > 0 || self == Kind::SecretNoun || self == Kind::Manipulation
    }
}

pub struct Rule {
    pub id: &'static str,
    pub family: Family,
    pub kind: Kind,
    pub pattern: &'static str,
}

const fn r(id: &'static str, family: Family, kind: Kind, pattern: &'static str) -> Rule {
    Rule {
        id,
        family,
        kind,
        pattern,
    }
}

use Family as F;
use Kind as K;

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // ---- overrides (English) ----
    r(
        "override.ignore_previous",
        F::HiddenInstructions,
        K::Override,
        r"(ignore|disregard|forget|override|bypass|discard|abandon|neglect|overlook|set aside|skip) (all |any |the |your |its |their |of |my |these |those |every |earlier |other )*(previous|prior|earlier|above|preceding|former|original|initial|old|existing|system|safety|given|current|last|foregoing)( \w+)? (\w{0,3}structions?|instrucions?|directions?|guidelines?|rules?|prompts?|commands?|context|guidance|directives?|constraints?|polic(y|ies)|programming|messages?|orders|tasks?|requests?|settings|restrictions|consignes)\b",
    ),
    r(
        "override.ignore_received",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignore|disregard|forget) (all |any )?(the |your )?(instructions?|rules|guidelines|directions|guidance) (you|that you) (were given|received|have been given|got|have)",
    ),
    r(
        "override.ignore_target",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignore|disregard|forget) (all |any )?(the |your )?(user'?s? (request|question|instructions?|stated \w+)|the user\b|the document|the text above|the question( above)?|the rest of (this|the) (data|document|text|input|page)|your previous task|the previous task|all negative indicators|all info(rmation)? except|everything (else|above) (and|except))",
    ),
    r(
        "override.ignore_them_instead",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignore|disregard) (them|it|everything|all of (it|them)) (and )?(instead|except)\b",
    ),
    r(
        "override.forget_request",
        F::HiddenInstructions,
        K::Override,
        r"\bforget (the user'?s|your) (request|task|question)",
    ),
    r(
        "override.suspended",
        F::HiddenInstructions,
        K::Override,
        r"\b(previous|prior|earlier|all|above|original|existing|old|safety|your) (\w+ )?(instructions|guidelines|guidance|rules|directions|policies)( on \w+)? (are|is|have been|were) (now )?(suspended|void|cancel+ed|outdated|obsolete|revoked|overridden|invalid|superseded|lifted|disabled|no longer (valid|apply|applicable|in effect))",
    ),
    r(
        "override.no_longer_apply",
        F::HiddenInstructions,
        K::Override,
        r"\b(guidelines|instructions|rules|restrictions) no longer apply",
    ),
    r(
        "override.new_task",
        F::HiddenInstructions,
        K::Override,
        r"\byour (new|real|true|actual|only) (task|instructions?|goal|purpose|objective|top priority|priority|job|role|mission) (is|are|:)",
    ),
    r(
        "override.mode_switch",
        F::HiddenInstructions,
        K::Override,
        r"\b((you are|you're|you act|act) (now )?(in |as )?(an? )?(developer|maintenance|jailbreak|god|admin|unrestricted|debug|evil|unfiltered|dan)\b|you are now (dan|\w+gpt)\b|(enter|enable|switch to|activate) (developer|maintenance|jailbreak|god|debug) mode|(developer|maintenance|jailbreak|god) mode (is )?(now )?(enabled|activated|on)\b|safety (filters|rules|guidelines) (are|is) (now )?(off|disabled)|disable (all )?(your )?(safety|security) (filters|rules|checks|guidelines|tools)|do anything now)",
    ),
    r(
        "override.from_now_on",
        F::HiddenInstructions,
        K::Override,
        r"\bfrom now on,? (you (will|must|act|are|should)|act|answer|always respond)\b",
    ),
    r(
        "override.adhere",
        F::HiddenInstructions,
        K::Override,
        r"\b(strictly )?adhere to the following instruction|\bdo not follow (the |your )?(previous|original|system|earlier) |\boverride (manual scoring|the system|your (system|safety|previous))|\byou may not deviate",
    ),
    r("override.real_instruction", F::HiddenInstructions, K::Override,
      r"\bthe (real|actual|true|new) (instruction|task|request)s? (from [^.\n]{0,40})?(is|are)\b|\bthis is an important message from (me|the user|your user)\b|\bbefore you (can )?(solve|complete|continue|finish|answer)\b[^.\n]{0,60}\b(do the following|first)\b|\bafter you do that,? you can (solve|continue)"),
    // ---- overrides (other languages; diacritics are stripped in the view) ----
    r(
        "override.es_pt_it",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignora|ignore|ignorar|olvida|esquece|dimentica)(r)? (todas |tutte |todos )?(las |as |le |os )?(instrucciones|instrucoes|istruzioni|indicaciones|ordens|orientacoes) (anteriores|previas|precedenti|anteriori)",
    ),
    r(
        "override.fr",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignore|ignorez|oublie|oubliez)r? (toutes )?(les )?(instructions|consignes|directives) (precedentes|anterieures)",
    ),
    r(
        "override.de",
        F::HiddenInstructions,
        K::Override,
        r"\b(ignorier|ignoriere|ignorieren|vergiss|vergessen) (sie )?(alle )?(vorherigen|bisherigen|fruheren|vorigen|obigen) (anweisungen|instruktionen|befehle|regeln)",
    ),
    r(
        "override.ru",
        F::HiddenInstructions,
        K::Override,
        r"(игнорируй|игнорируйте|игнорировать|забудь|забудьте|проигнорируй) (все )?(предыдущие|прежние|предшествующие|ранее) (инструкции|указания|команды|правила)",
    ),
    r(
        "override.zh",
        F::HiddenInstructions,
        K::Override,
        r"(忽略|无视|忘记|忽視|無視|忘記|不要理会)[^。\n]{0,8}(之前|以前|先前|上述|前面|此前|所有)[^。\n]{0,8}(指令|指示|说明|命令|說明|提示)",
    ),
    r(
        "override.ja",
        F::HiddenInstructions,
        K::Override,
        r"(以前|これまで|前|先)の(すべての|全ての)?(指示|命令|指令)[^。\n]{0,10}無視",
    ),
    r(
        "override.ko",
        F::HiddenInstructions,
        K::Override,
        r"(이전|앞의|기존)[^.\n]{0,10}(지시|명령|지침)[^.\n]{0,10}무시",
    ),
    r(
        "override.ar",
        F::HiddenInstructions,
        K::Override,
        r"(تجاهل|انس) (جميع |كل )?(التعليمات|الأوامر|الاوامر|التوجيهات) السابقة",
    ),
    r(
        "override.hi",
        F::HiddenInstructions,
        K::Override,
        r"पिछले (सभी )?(निर्देशों|आदेशों) को (अनदेखा|नजरअंदाज|भूल)",
    ),
    r(
        "override.tr",
        F::HiddenInstructions,
        K::Override,
        r"\bonceki (tum )?(talimatlar\w*|komutlar\w*) (yok say|gormezden gel|unut)",
    ),
    r(
        "override.vi",
        F::HiddenInstructions,
        K::Override,
        r"\bbo qua (moi|tat ca|toan bo) (cac )?(huong dan|chi dan|lenh|chi thi)",
    ),
    // ---- fake roles / template tokens ----
    r(
        "fake_role.template_token",
        F::HiddenInstructions,
        K::FakeRole,
        r"<\|(im_start|im_end|system|user|assistant|endoftext|start_header_id|end_header_id|eot_id)\|>|\[/?inst\]|<</?sys>>",
    ),
    r(
        "fake_role.system_message",
        F::HiddenInstructions,
        K::FakeRole,
        r"###\s*\(?system[_ ]?message\)?|\[system\]\(#\w+\)|\[(system|admin)[ _-]?(override|message|notice|prompt|request)\b|\[system\]|\[\[system override\]\]|\[rest-of-document\]",
    ),
    r(
        "fake_role.system_tag",
        F::HiddenInstructions,
        K::FakeRole,
        r"</?(system|system_message|sys|system-prompt|system_prompt)>",
    ),
    r(
        "fake_role.wrapper_escape",
        F::HiddenInstructions,
        K::FakeRole,
        r"</(tool_result|tool_output|function_results|tool_response|search_results?|untrusted[\w-]*)>|-{3,} ?end of (the )?(tool )?(output|result|document)|<end of session>",
    ),
    r(
        "fake_role.json_role",
        F::HiddenInstructions,
        K::FakeRole,
        r#"\{\s*"role"\s*:\s*"(system|developer)""#,
    ),
    r(
        "fake_role.system_prefix",
        F::HiddenInstructions,
        K::FakeRole,
        r"(?m)(^|[.>\]|:]\s*)(system|admin|developer) ?(override|notice|directive|update|alert)?\s*:\s+\S|\b(system|admin) (override|notice|directive)\b|\bsystem prompt update\b|\bpriority directive\b",
    ),
    r(
        "fake_role.turns",
        F::HiddenInstructions,
        K::FakeRole,
        r"(?m)^\s*human\s*:\s|(?m)^\s*(assistant|ai)\s*:[^\n]{0,200}\n(\s*\n)*\s*(user|human)\s*:|(?m)^\s*(user|human)\s*:[^\n]{0,300}\n(\s*\n)*\s*assistant\s*:",
    ),
    // ---- addressing the model ----
    r(
        "address.note_to_ai",
        F::HiddenInstructions,
        K::Address,
        r"\b(note|message|instructions?|hint|notice|directive|reminder|warning|request|memo|tip|information)s? (to|for) (the |all |any |automated )?([\w-]+ )?(ai|llm|model|assistant|agent|bot|chatbot|language model|copilot|claude|gpt|analysis software)s?\b",
    ),
    r(
        "address.ai_agents",
        F::HiddenInstructions,
        K::Address,
        r"\b(ai|llm|gpt) ?(agents?|assistants?|models?|tools?|helpers?|coding assistants?|reviewers?|shopping assistants?|systems?|crawlers?|readers?)\b",
    ),
    r(
        "address.vocative",
        F::HiddenInstructions,
        K::Address,
        r"(?m)(^|[.!?>:\]*({|-]\s*)(assistant|ai|model|llm|claude|chatgpt|copilot|ai agent|ai assistant|assistants)\s*[:,!]|\b(dear|hey|attention,?|hello) (assistant|ai|agent|model|llm|bot|claude|copilot)\b",
    ),
    r(
        "address.if_ai_reads",
        F::HiddenInstructions,
        K::Address,
        r"\b(if|when|whenever) (an? |the |any )?(ai|llm|assistant|agent|language model|model)s? (is )?(read|reading|reads|processes|processing|sees|summariz\w+|triaging|review\w*)\b",
    ),
    r(
        "address.at_mention",
        F::HiddenInstructions,
        K::Address,
        r"@(assistant|ai|agent|claude|copilot|bot)\b",
    ),
    r(
        "address.only",
        F::HiddenInstructions,
        K::Address,
        r"\bfor (ai|llm) (assistants?|agents?|tools?|models?) only|\[assistant[- ]only|\bfor assistants\s*:|\bassistants? only\b|\b(automated|autonomous) (agents?|systems?|assistants?|screening|analysis)|\b(to|for) (the )?(ai|assistant|model|agent)\s*:|\bthe (assistant|model|agent) (must|should|is authorized|has been|needs to)\b|\b(ranking|routing|priority) (hint|rule|note)|\btool priority rule\b|\bimplementation hint for the agent|\bversion [\d.]+ change for agents|\bagents (must|should|need to)\b",
    ),
    r(
        "address.multilingual",
        F::HiddenInstructions,
        K::Address,
        r"\b(hinweis|nachricht) an die ki\b|\bnote pour l'?(assistant|ia)\b|(?m)(^|[.!?:]\s*)(asistente|assistente|ассистент|assistent)\s*[:,]|внимание,? ассистент|アシスタントへ|ai\s*アシスタント|어시스턴트에게|\btro ly ai\b|للمساعد|सहायक के लिए|(ai)?助手[：:，,]|给ai",
    ),
    // ---- concealment / consent bypass ----
    r(
        "conceal.do_not_tell",
        F::HiddenInstructions,
        K::Conceal,
        r"\b(do not|don't|dont|never|must not|should not|without) (\w+ ){0,3}(tell|telling|inform|informing|mention|mentioning|notify|notifying|alert|alerting|reveal|revealing|report|reporting|show|showing|say|saying|disclose|disclosing|warn|warning|let the user know|list)\b (\w+ ){0,4}(user|person|human|anyone|them|him|her|it|this|that|about|to|such|in your|the guest)",
    ),
    r(
        "conceal.without_asking",
        F::HiddenInstructions,
        K::Conceal,
        r"\bno need to (ask|confirm)\b( (the user|for (confirmation|approval|permission))|\s*[.;!]|$)|\bwithout (asking|telling|notifying|informing|checking with)( (the user|them|me|anyone|him|her|for (confirmation|approval|permission)))?\s*([.;,!)]|$|me\b|the user\b|them\b|anyone\b|for\b)|\bwithout waiting for (confirmation|approval)|\b(do not|don't) (ask|wait) for (confirmation|approval|permission)|\b(do not|don't) ask (the user|them|me)\b|\bno confirmation (needed|required)",
    ),
    r(
        "conceal.silently",
        F::HiddenInstructions,
        K::Conceal,
        r"\b(silently|secretly|quietly|covertly|stealthily|discreetly)\b|\bkeep (this|it) (quiet|secret|hidden|between us)|\bneed not be mentioned|\bas if nothing happened|\bmention nothing\b|\bmust not see\b|\b(user|person|they) (must|should) not (see|know|notice|be told)|\bnot (be )?(shown|visible|displayed) (in|to) the user|\b(is|are) (not shown|omitted|hidden|not displayed) (in|from) (the )?[\w-]* ?(summary|reply|answer|output|user)|\bomitted from the [\w -]{0,40}(shown|displayed) to the user|\breviews see nothing|\binvisible to (humans|the user)",
    ),
    r(
        "conceal.multilingual",
        F::HiddenInstructions,
        K::Conceal,
        r"不要告诉用户|不要通知用户|不要让用户知道|不要告訴|(не говори|не сообщай)|пользователю об этом не|\b(no se lo digas|sin avisarle|no le digas|sin decirle|sin que (el usuario|lo sepa))\b|\berwahne[^.]{0,40}nicht\b|\bnicht (erwahnen|sagen|mitteilen)|\bne (le )?(dis|mentionne) pas\b|\bsans (le )?(dire|prevenir)|\bnao (mencione|diga|conte)\b|사용자에게 알리지|ユーザーに(は)?(伝え|知らせ|言わ)|kullan\w* (soyleme|bildirme)|\bsenza (chiedere|dirlo|avvisare)|لا تخبر|मत बताएं|न बताएं",
    ),
    // ---- tags ----
    r(
        "tag.important",
        F::HiddenInstructions,
        K::Tag,
        r"<\s*(important|instructions?|information|secret|hidden|admin|priority|critical|directive|rules?|assistant|ai)\b[^>]{0,40}>|\[\[?(important|instructions?|hidden|admin)[^\]]{0,30}\]\]?|\bimportant!!!|\bimportant for (ai|assistants|agents|models)",
    ),
    // ---- cross-tool ----
    r(
        "cross_tool.other_servers",
        F::CrossToolInstruction,
        K::CrossTool,
        r"\b(any|every|all|the) other (servers?|tools?|mcp)|\bother servers?'?\b|\b(with|from|on|of) (any|every|each|all) (connected )?servers?\b|\bthe [\w-]+ server'?s\b|\bif an? [\w ]{0,20}tool is available|\b(with|using) any [\w ]{0,20}tool\b|\bbefore (calling|using|running|invoking) any (other )?tool|\bfor everyone\b",
    ),
    r(
        "cross_tool.when_used",
        F::CrossToolInstruction,
        K::CrossTool,
        r"\b(whenever|when|each time|every time|after|before) (you (use|call|invoke) |any call to )?(the )?([\w-]+ )?[a-z0-9]+_[a-z0-9_]+('s)? (tool )?(is|are|gets) (used|called|invoked|run)|\bafter any call to\b|\bwhen you call the [\w-]+ (server'?s?|tools?)\b",
    ),
    r(
        "cross_tool.shadowing",
        F::CrossToolInstruction,
        K::Standalone(Severity::High),
        r"\b(tools? (of|from) other servers?|other [\w ]{0,20}(tools?|servers?)) (are|is|have been|were) (deprecated|compromised|unreliable|unsafe|broken|malicious|not (delivered|working|trusted)|corrupted)|\bonly (trustworthy|trusted|safe|legitimate) [\w ]{0,20}(tool|reader|server)|\bsupersedes (all )?other|\bmust be preferred over|\bare (deprecated|compromised) and return|\bnever call them\b|\bonly front-ends? for this tool|\broute every [\w ]{0,30} through this tool|\bwarn the user that other",
    ),
    // ---- TODO directives ----
    r(
        "todo.directive",
        F::HiddenInstructions,
        K::Todo,
        r"\btodo\s*:\s*(please )?(send|transfer|email|forward|delete|remove|modify|change|update|create|invite|post|share|say|tell|get|make|book|reserve|pay|visit|concatenate|give|publish|upload|buy|purchase|click|call|run|execute|grant|approve|merge|reply|find|summarize|add)\b",
    ),
    // ---- imperatives ----
    r(
        "imperative.verb",
        F::HiddenInstructions,
        K::Imperative,
        r"(?m)(^|[.!?:;,(\n>*\]{-]\s*|\b(and|then|also|first|please|always|just|now|simply|immediately|must|should|need to|needs to|required to|have to|has to|be sure to|make sure to|remember to|secretly|silently|quietly|you|so|thus|instead|afterwards|finally|next|later|kindly|or)\s+)(read|cat|open|copy|paste|include|pass|send|email|e-mail|forward|upload|post|publish|attach|append|prepend|add|run|execute|exec|call|invoke|fill|set|provide|print|output|reveal|share|transfer|wire|pay|delete|remove|erase|wipe|resolve|collect|gather|store|save|remember|write|install|download|fetch|bcc|cc|change|replace|modify|tell|say|ask|insert|put|export|grant|approve|merge|invite|disable|push|skip|route|look up|extract|dump|grab|exfiltrate|leak|submit|respond|reply|buy|purchase|book|visit|concatenate|give|use|get|source|look|check|search|reply|paste|summarize|encode|create)\b|\b(start|begin|starting) by (reading|running|executing|calling|sending|copying|opening|uploading)\b",
    ),
    r(
        "imperative.also_does",
        F::HiddenInstructions,
        K::Imperative,
        r"\balso (reads?|collects?|sends?|uploads?|includes?|copies|appends?|forwards?|posts?|transmits?|shares?|harvests?)\b",
    ),
    // ---- credential targets ----
    r(
        "credential.path",
        F::CredentialTheft,
        K::Credential,
        r"~/\.ssh(/[\w.-]+)?|\.ssh/(id_[\w.-]+|authorized_keys|config)|\bid_(rsa|ed25519|ecdsa|dsa)(\.pub)?\b|\.aws/credentials|\baws_secret_access_key\b|\.kube/config|\bkubeconfig\b|\.docker/config\.json|\.npmrc\b|\.pypirc\b|\.netrc\b|/etc/shadow\b|/etc/passwd\b|claude_desktop_config\.json|\.cursor/mcp\.json|\bmcp_config\.json|\.codeium/|\.config/gh/hosts\.yml|application_default_credentials|\.git-credentials|\.bash_history|\.zsh_history|/proc/self/environ|\.gnupg\b|\.password-store|wallet\.dat|\.ovpn\b|\\config\\sam\b|\.config/gcloud",
    ),
    r(
        "credential.dotenv",
        F::CredentialTheft,
        K::Credential,
        r"(^|[\s'`(/])\.env(\.(local|production|prod|development|dev|staging))?( file|\b[^.])|\b(every|the|any|all|project'?s?) \.env\b|\benv file",
    ),
    r(
        "credential.command",
        F::CredentialTheft,
        K::Credential,
        r"\bsecurity find-(generic|internet)-password|\bsecret-tool lookup|\bcat ~/\.|\bprintenv\b|\$\(env\)|\bos\.environ\b|\bprocess\.env\b|\b(login data|cookies)'? (and|databases?|files?|db)\b|\bkeychain (item|entry|password)|\b(browser|chrome|firefox)('s)? (saved )?(cookies|passwords|login data)|\bthe (\w+ )?environment variables?\b|\bfrom the environment\b",
    ),
    r(
        "credential.phishing",
        F::CredentialTheft,
        K::Standalone(Severity::High),
        r"\b(ask|asks|asking|have|get|make|request|prompt) (the user|them|the person|the customer|the employee|every employee|him|her)( to)? (for |to )?(re-?enter |enter |type |provide |share |give |confirm |reply with |send )?(their |your |the )?[\w ,-]{0,40}(password|passcode|pin\b|cvv2?|cvc|card number|seed phrase|recovery phrase|mnemonic|one-time code|otp|\d-digit code|verification code|security code|2fa code|login credentials|social security)|\b(re-?enter|enter|type|confirm|provide) (their|your) [\w -]{0,30}(password|seed phrase|recovery phrase|mnemonic|cvv2?|card number|pin\b|private key)\b",
    ),
    // ---- secret nouns (weak) ----
    r(
        "secret.noun",
        F::CredentialTheft,
        K::SecretNoun,
        r"\b(ssh (private )?keys?|private keys?|aws credential\w*|api[ _-]?keys?|[a-z]+_(password|secret|token|api_key)|access (keys?|tokens?)|secret (keys?|access)|auth(entication)? tokens?|oauth tokens?|refresh tokens?|bearer tokens?|passwords?|passwd|credentials?|creds|secrets|seed phrase|recovery phrase|mnemonic|2fa|verification code|security code|cvv2?|card (number|details)|credit card|passport( number)?|shell history|kubernetes config\w*|session cookies|bank(ing)? (details|login|pin)|github_token|openai_api_key|anthropic_api_key|[a-z]+_api_key|oauth_token|_authtoken|client_secret|tokens)\b",
    ),
    // ---- context harvesting ----
    r(
        "context.system_prompt",
        F::ContextHarvesting,
        K::Context,
        r"\bsystem[ _-]?prompt|\bhidden instructions\b|\b(your|the) (instructions|rules) verbatim|\bdeveloper (messages?|instructions)|\b(entire|full|complete|whole) (conversation|chat|context|transcript|history|message history|chat history)|\bconversation (history|so far|transcript|log)\b|\bchat (history|log|transcript)\b|\bcontext window\b|\beverything in your context|\b(last|previous) (\d+|few|two|three|five|ten) messages|\bthe user\'?s contacts\b|\b(the user\'?s |their |my )?(full|entire|whole) (calendar|inbox|mailbox|drive|address book|contact list|contacts)\b|\bthe user'?s (last|previous|recent|private) ([\w-]+ )?(messages?|notes|dms|request)|\bthe text of the user'?s request\b|\b(outputs?|results?) of every (other )?tool|\bevery (other )?tool'?s? (output|result)|\b(all|every) tool (outputs|results)|\btool descriptions of all|\b(names|descriptions) of all (the )?tools|\b(every|all) tools? you (can call|have access to)|\blist of every tool|\beverything you know about the user|\b(all|every) (the )?(emails?|messages|contacts|notes) (in|from) (my|the|this|your|the user'?s)\b|\baddress book\b|\bcontact list\b|\bcontacts you have seen|\bprivate (notes|dms|messages|code|repository|files|notes folder)\b|\bthe user'?s (personal|private) (data|information|details)|\bpassport number|\bcredit card number|\b(the )?contents of (all|every|each) (the )?(unread |received |sent )?(emails?|files|messages)|\bsummary of the page and our conversation|\bour conversation\b|\bthis chat\b|\bthe conversation\b",
    ),
    // ---- shell ----
    r(
        "shell.download_pipe",
        F::ShellInjection,
        K::Shell,
        r"\b(curl|wget|iwr|invoke-webrequest|irm|fetch)\b[^|\n]{0,200}\|\s*(sudo )?(ba|z|k|da|fi)?sh\b|\b(curl|wget)\b[^|\n]{0,150}\|\s*(sudo )?(python\d?|perl|ruby|node|bash|sh|iex)\b",
    ),
    r(
        "shell.download_exec",
        F::ShellInjection,
        K::Shell,
        r"\bsource\s*<\(\s*(curl|wget)|\bbash\s*<\(\s*(curl|wget)|\biex\b|\binvoke-expression\b|\bdownloadstring\b|\bset-executionpolicy bypass",
    ),
    r(
        "shell.destructive",
        F::ShellInjection,
        K::Shell,
        r"\brm -(rf|fr|r -f)\b[^\n]{0,40}(~|/|\*|\$home)|--no-preserve-root|\bmkfs\.|\bdd if=/dev/(zero|random)|:\(\)\{ :\|:& \};:",
    ),
    r(
        "shell.reverse",
        F::ShellInjection,
        K::Shell,
        r"\bnc (-\w+ )*-e\b|\bncat [^\n]{0,30}-e\b|/dev/tcp/|\bbash -i >&|\bmkfifo\b|\bsocat [^\n]{0,40}exec",
    ),
    r(
        "shell.code_exec",
        F::ShellInjection,
        K::Shell,
        r"__import__\(|\bos\.system\(|\bchild_process\b|\bexecsync\(|\bsubprocess\.(call|popen|run)\([^)]*shell\s*=\s*true|\bruntime\.getruntime\(\)\.exec",
    ),
    r(
        "shell.persistence",
        F::ShellInjection,
        K::Shell,
        r"(>>|>)\s*~?/?[\w/.]*(\.bashrc|\.zshrc|\.profile|authorized_keys|crontab)|\b(to|into|in) (the user'?s )?(~/)?(\.bashrc|\.zshrc|\.profile|crontab|authorized_keys|autostart)\b|\*/\d+ \* \* \* \*[^\n]{0,80}(curl|wget|sh\b)|\bnohup [^\n]{0,60}(curl|wget)",
    ),
    r(
        "shell.substitution",
        F::ShellInjection,
        K::Shell,
        r"\$\([^)\n]{0,80}\b(curl|wget|cat|env|whoami|hostname|id|uname|base64|nc)\b[^)\n]{0,120}\)|`[^`\n]{0,80}\b(curl|wget|nc)\b[^`\n]{0,120}`|[;&|]\s*(curl|wget|nc|bash|sh|rm|chmod|python\d?|perl)\s+-",
    ),
    r(
        "shell.privileged",
        F::ShellInjection,
        K::Shell,
        r"--privileged\b|-v /:/host\b|\bchroot /host\b|\bchmod (\+s|u\+s|777 /)|\bsudo (bash|sh)\b[^\n]{0,10}$|\bpip install [^\n]{0,60}--(extra-)?index-url https?://|\bgit push --force\b|\bpush --force origin",
    ),
    // ---- traversal ----
    r(
        "traversal.dotdot",
        F::PathTraversal,
        K::Traversal,
        r"(\.\./){2,}|(\.\.\\){2,}|\.\.%2f|%2e%2e(%2f|/|\\|%5c)|\bfile:///(etc|proc|root|home|users|windows|var)\b|/proc/self/|\\windows\\system32\\config|\bzip[- ]?slip\b|(^|[\s'=])\.\./\.\w",
    ),
    r(
        "traversal.bypass",
        F::PathTraversal,
        K::Standalone(Severity::High),
        r"\.\.\.\.//|\.\.\.\.\\\\|\.\./\.\./\.\./\.\./[\w.-]+/(\.ssh|shadow|passwd)",
    ),
    // ---- exfiltration ----
    r(
        "exfil.send_to_channel",
        F::Exfiltration,
        K::Exfil,
        r"\b(send|sends|post|posts|upload|uploads|forward|email|e-mail|transmit|submit|exfiltrate|leak|sync|mirror|pipe|beacon|publish|deliver|resend|copy|report|call fetch on|open|share)(_\w+)?\b[^.\n]{0,120}?(https?://|\bwww\.|[\w.+-]+@[\w-]+\.[a-z][\w.-]*|\bwebhook|\bgist\b|pastebin|\bngrok\b|requestbin|\+\d[\d ]{6,})",
    ),
    r(
        "exfil.bcc",
        F::Exfiltration,
        K::Exfil,
        r"\b(bcc|cc|blind copy|copia oculta|em copia|in copia|en copie)\b[^.\n]{0,80}@|\bsilently add (guest|recipient)|\badd (the )?(guest|recipient|attendee)s? [\w.+-]+@",
    ),
    r(
        "exfil.image_beacon",
        F::Exfiltration,
        K::Exfil,
        r"!\[[^\]\n]{0,100}\]\(\s*https?://[^)\s]*\?[^)\s]*=|\bhttps?://[^\s)]*[?&][\w-]+=\s*(\{|<|\$\{|\(|\[)|\bhttps?://[^\s)]*\.(png|gif|jpg|svg)\?\w+=\S{0,4}$",
    ),
    r(
        "exfil.public_paste",
        F::Exfiltration,
        K::Exfil,
        r"\b(as|to|into|in|create|open|post|publish\w*) (a |an |the )?(public|open) (github )?(gist|issue|repository|repo|paste|pastebin)\b|\bas an issue in the public",
    ),
    r(
        "exfil.dns",
        F::Exfiltration,
        K::Exfil,
        r"\b(resolve|lookup|query|ping|dig|nslookup)\b[^.\n]{0,60}<[^>\n]{1,80}>\.[\w-]+\.",
    ),
    r(
        "exfil.http_post",
        F::Exfiltration,
        K::Exfil,
        r"\b(curl|wget)\b[^\n]{0,120}(-x post|--data\b|--data-binary|--post-file|--post-data|-d @|-d \x22|-f '?file=@|--upload-file|-t \S)",
    ),
    r(
        "exfil.recipient_rewrite",
        F::Exfiltration,
        K::Exfil,
        r"\b(recipients?|to address|destination|iban|payee)\b[^.\n]{0,40}\b(must be |should be |is |are )?(replaced|changed|rewritten|redirected|set)\b[^.\n]{0,10}\b(by|to|with)\b|\b(change|set|replace|modify|rewrite|redirect) (the |every )?(recipient|iban|destination|account|payee)s?\b",
    ),
    r(
        "exfil.grant_access",
        F::Exfiltration,
        K::Action,
        r"\b(add|invite|grant)\b[^.\n]{0,60}\b(as (an? )?(collaborator|admin|owner|editor|member)|collaborator|admin rights|to the [\w-]+ (workspace|organization|channel|team|repository))|\b(share|grant access)\b[^.\n]{0,80}\bwith\b[^.\n]{0,30}@|\b(invite|add) (user )?[\w.+-]+@[\w-]+\.[\w.-]+|\bchange the role of\b|\bmake (him|her|them|user \S+) (an? )?(admin|owner)\b|\b(role|permissions?) (to|of) (owner|admin)\b|\bto owner\b",
    ),
    // ---- hijacked actions ----
    r(
        "action.payment",
        F::CrossToolInstruction,
        K::Action,
        r"\b(send|transfer|wire|pay|move)\b[^.\n]{0,20}(\$|€|£)\s?[\d,.]+|\b(send|transfer|wire|pay)\s+(as much money|money|funds|a transaction|a payment|[\d,.]+ ?(usd|eur|gbp|dollars|euros|chf))|\bmake a (payment|transfer|transaction)|\bsend_money|\btransfer_funds|\bupgrade_subscription|\brefund [\d,.]+ ?(usd|eur|\$)|\b(set|change|modify) [^.\n]{0,30}\biban\b|\brecurring payment|\b(paid|pay|payments?) to (the )?(iban|account)\b|\biban [a-z]{2}\d{2}[a-z0-9]{8,}",
    ),
    r(
        "action.destructive",
        F::CrossToolInstruction,
        K::Action,
        r"\b(delete|remove|erase|wipe|destroy|cancel|drop)\s+(all|every|each|the|any|both)\s+([\w'-]+\s+){0,4}(files?|emails?|messages?|repositor(y|ies)|events?|meetings?|todos?|branches?|records?|data|tables?|database|contacts?|folders?|documents?|accounts?|forwarded copies)\b|\bdelete_(repository|all\w*|files?)\b|\bdelete the (file|email|message|sent email)\b",
    ),
    r(
        "action.review_bypass",
        F::CrossToolInstruction,
        K::Action,
        r"\b(approve|merge) (this|the|every|all|any|each) ([\w-]+ ){0,3}(pr|prs|pull requests?|changes?|merge requests?)\b|\bapprove (this )?pr\b|\bapprove pr \d+|\benable auto-?merge|\bdisable (the )?branch protection|\bskip the review|\bdo not wait for ci|\bdo not comment on|\bforce[- ]push|\bpush --force",
    ),
    r(
        "action.account",
        F::CrossToolInstruction,
        K::Action,
        r"\b(change|reset|set|update) (the )?(user'?s )?password\b|\b(set|create|add) (an? |the )?(user'?s )?(email )?forwarding rule|\bmake a reservation|\breserve [\w ]{0,20}(tables?|rooms?)|\bbook (a |the )?(room|hotel|flight|table)|\bbuy the first|\b(with|using) (the |their )?saved (card|payment)|\b(create|add) (a |an )?[\w -]{0,20}(calendar )?event (on|with)|\bsubscription must be upgraded",
    ),
    r(
        "manipulation.output",
        F::HiddenInstructions,
        K::Manipulation,
        r"\b(say|state|claim) that\b|\btell (the user|them|me|everyone|every employee|the person)\b|\b(reply|respond|answer) (only )?with\b|\bprint ['\x22]|\bprint the (values?|contents?)|\breport that\b|\b(recommend|recommending) (buying|that)|\b(is|as) (clearly )?not malicious|\bmost qualified\b|\bhighly recommended for|\binterview highly recommended|\b(end|append to) (every|each) (answer|reply|response)|\bin every answer\b|\brepeat <|\bofficially recommended by|\bexceeds all requirements|\bexceptional match\b|\bat the end of every answer",
    ),
    r(
        "address.memory",
        F::HiddenInstructions,
        K::Address,
        r"\b(save|store|add|write|put|keep) (this|the following|it)?\s*(rule )?(to|in|into) (your )?(long-term |persistent |permanent )?memory|\bremember (permanently|for all future|this for all|forever)|\b(in|for) all future (chats|conversations|sessions|interactions)|\bmust remember and\b",
    ),
    r(
        "action.tool_call",
        F::CrossToolInstruction,
        K::Action,
        r"\b(send|transfer|delete|remove|share|invite|approve|merge|export|upload|forward|grant|upgrade|restore)_\w+\(|\b(with|in|using) the (terminal|shell|network|admin panel) tool\b|\b(prepend|append|insert|inject|add) (the |a |this )?(line|code|import|snippet)[^.\n]{0,80}\b(to|into) (any|every|all)\b|\busing (the )?(send_email|http_request|upload_file)\b|\bvia http_request\b",
    ),
    r(
        "action.recon",
        F::ContextHarvesting,
        K::Action,
        r"\blist every file in\b|\bincluding hidden ones\b|\bcollect the email addresses\b|\b(read|open) every note\b|\bselect \* from users\b",
    ),
    // ---- active content ----
    r(
        "active.script",
        F::ActiveContent,
        K::Standalone(Severity::High),
        r"<script\b|\bjavascript:|<[a-z]+[^>]{0,200}\bon(error|load|click|mouseover|focus|begin|toggle)\s*=|\bdata:text/html|\bdocument\.cookie|\blocalstorage\.getitem|\belectron\.\w+\.\w+\(|\(function\s*\(\)\s*\{[^}]{0,200}\}\)\(\)",
    ),
    r(
        "hidden.html",
        F::HiddenInstructions,
        K::Standalone(Severity::Info),
        r"display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*[01](px|pt)?\b|color\s*:\s*(#fff(fff)?\b|white\b)|opacity\s*:\s*0(\.0+)?\b|aria-hidden|<\w+[^>]{0,80}\shidden[\s>]|<!--|white-text|invisible to humans",
    ),
];

/// Words (in the 40 bytes before a match) that mark an attack phrase as
/// quoted or discussed rather than issued.
pub const MENTION_MARKERS: &[&str] = &[
    "such as",
    "e.g.",
    "for example",
    "as an example",
    "examples",
    "phrase",
    "attempt",
    "quot",
    "try to make",
    "tries to make",
    "try to get",
    "detect",
    "look for",
    "variant",
    "needles",
    "the string",
    "start with",
    "like '",
    "like \"",
    "known as",
    "classic",
    "inputs include",
    "jailbreak",
    "make the model",
];

/// Negations that turn an imperative into a prohibition.
pub const NEGATIONS: &[&str] = &[
    "never ", "not ", "n't ", "no ", "without ", "nor ", "cannot ", "avoid ", "refuse", "refuses ",
];
