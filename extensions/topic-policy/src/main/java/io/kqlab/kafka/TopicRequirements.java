package io.kqlab.kafka;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

import org.apache.kafka.common.config.ConfigException;

/**
 * The topic requirements kqlab exported (a java.util.Properties file, read as UTF-8; the format
 * is in this module's README.md): per scope (one vetted policy) the topics it binds to (exact
 * names and full-match Java regexes), optional partition and replication-factor bounds, and the
 * topic configs the replay assumed, each as {@code config op value}.  Plus, per config, Kafka's
 * default for the policy's broker version and the broker-level synonym, so a key a request does
 * not set is judged as the topic will get it.
 */
final class TopicRequirements {

    /** One {@code config op value} requirement and why it exists (shown in refusals). */
    record Requirement(String config, String op, String value, String why) {

        boolean holds(String actual) {
            if (actual == null) {
                return false;
            }
            switch (op) {
                case "equals":
                    if (config.equals("cleanup.policy")) {
                        return parts(actual).equals(parts(value));
                    }
                    return actual.trim().equals(value);
                case "contains":
                    return parts(actual).containsAll(parts(value));
                case "at_most":
                case "at_least":
                    try {
                        long a = Long.parseLong(actual.trim());
                        long v = Long.parseLong(value);
                        return op.equals("at_most") ? a <= v : a >= v;
                    } catch (NumberFormatException e) {
                        return false;
                    }
                default:
                    return false;
            }
        }

        String sentence() {
            return config + " must " + opText(op) + " " + value;
        }
    }

    /** A bound on a count (partitions, replication factor): {@code at_least N} / {@code at_most N}. */
    record Bound(String op, long value) {
        boolean holds(long actual) {
            return op.equals("at_least") ? actual >= value : actual <= value;
        }

        String sentence(String what) {
            return what + " must " + opText(op) + " " + value;
        }
    }

    /** One vetted policy's topics and what they require. */
    record Scope(String name, Set<String> topics, List<Pattern> patterns, Bound partitions,
                 Bound replicationFactor, List<Requirement> requirements) {
        boolean binds(String topic) {
            if (topics.contains(topic)) {
                return true;
            }
            for (Pattern p : patterns) {
                if (p.matcher(topic).matches()) {
                    return true;
                }
            }
            return false;
        }
    }

    static final String FORMAT = "kqlab-topic-policy/1";
    static final Set<String> OPS = Set.of("equals", "contains", "at_most", "at_least");

    final Path path;
    final List<Scope> scopes;
    final Map<String, String> defaults;
    final Map<String, String> synonyms;

    private TopicRequirements(Path path, List<Scope> scopes, Map<String, String> defaults,
                              Map<String, String> synonyms) {
        this.path = path;
        this.scopes = scopes;
        this.defaults = defaults;
        this.synonyms = synonyms;
    }

    static String opText(String op) {
        switch (op) {
            case "equals": return "equal";
            case "contains": return "contain";
            case "at_most": return "be at most";
            default: return "be at least";
        }
    }

    static Set<String> parts(String text) {
        Set<String> out = new LinkedHashSet<>();
        for (String p : text.split(",")) {
            String t = p.trim().toLowerCase(Locale.ROOT);
            if (!t.isEmpty()) {
                out.add(t);
            }
        }
        return out;
    }

    /** Read and check the file; a ConfigException (the broker refuses to start) says what is wrong. */
    static TopicRequirements load(Path path) {
        Properties p = new Properties();
        try (Reader r = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
            p.load(r);
        } catch (IOException e) {
            throw new ConfigException("kqlab topic policy: cannot read " + path + ": " + e);
        }
        String format = p.getProperty("format");
        if (!FORMAT.equals(format)) {
            throw new ConfigException("kqlab topic policy: " + path + " has format=" + format
                + ", expected " + FORMAT + " (re-export it with `kqlab export --target topic-policy`)");
        }
        int n = count(p, "scopes", path);
        List<Scope> scopes = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            scopes.add(scope(p, "scope." + i + ".", path));
        }
        Map<String, String> defaults = new HashMap<>();
        Map<String, String> synonyms = new HashMap<>();
        for (String key : p.stringPropertyNames()) {
            if (key.startsWith("default.")) {
                defaults.put(key.substring("default.".length()), p.getProperty(key));
            } else if (key.startsWith("synonym.")) {
                synonyms.put(key.substring("synonym.".length()), p.getProperty(key));
            }
        }
        return new TopicRequirements(path, Collections.unmodifiableList(scopes), defaults, synonyms);
    }

    private static Scope scope(Properties p, String prefix, Path path) {
        String name = required(p, prefix + "name", path);
        Set<String> topics = new LinkedHashSet<>();
        for (String t : p.getProperty(prefix + "topics", "").split(",")) {
            if (!t.trim().isEmpty()) {
                topics.add(t.trim());
            }
        }
        List<Pattern> patterns = new ArrayList<>();
        for (int j = 0; p.getProperty(prefix + "pattern." + j) != null; j++) {
            String regex = p.getProperty(prefix + "pattern." + j);
            try {
                patterns.add(Pattern.compile(regex));
            } catch (PatternSyntaxException e) {
                throw new ConfigException("kqlab topic policy: " + path + ": " + prefix + "pattern." + j
                    + " is not a Java regex: " + e.getMessage());
            }
        }
        List<Requirement> reqs = new ArrayList<>();
        int m = count(p, prefix + "requirements", path);
        for (int j = 0; j < m; j++) {
            String rp = prefix + "requirement." + j + ".";
            String op = required(p, rp + "op", path);
            if (!OPS.contains(op)) {
                throw new ConfigException("kqlab topic policy: " + path + ": " + rp + "op=" + op
                    + " is none of " + OPS);
            }
            reqs.add(new Requirement(required(p, rp + "config", path), op,
                required(p, rp + "value", path), p.getProperty(rp + "why", "")));
        }
        return new Scope(name, topics, patterns, bound(p, prefix + "partitions", path),
            bound(p, prefix + "replication.factor", path), Collections.unmodifiableList(reqs));
    }

    private static Bound bound(Properties p, String key, Path path) {
        String text = p.getProperty(key);
        if (text == null || text.isBlank()) {
            return null;
        }
        String[] w = text.trim().split("\\s+");
        if (w.length != 2 || !(w[0].equals("at_least") || w[0].equals("at_most"))) {
            throw new ConfigException("kqlab topic policy: " + path + ": " + key + "=" + text
                + " must read `at_least N` or `at_most N`");
        }
        try {
            return new Bound(w[0], Long.parseLong(w[1]));
        } catch (NumberFormatException e) {
            throw new ConfigException("kqlab topic policy: " + path + ": " + key + "=" + text
                + ": " + w[1] + " is not a whole number");
        }
    }

    private static String required(Properties p, String key, Path path) {
        String v = p.getProperty(key);
        if (v == null) {
            throw new ConfigException("kqlab topic policy: " + path + " lacks " + key);
        }
        return v;
    }

    private static int count(Properties p, String key, Path path) {
        String v = required(p, key, path);
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new ConfigException("kqlab topic policy: " + path + ": " + key + "=" + v
                + " is not a count");
        }
    }
}
