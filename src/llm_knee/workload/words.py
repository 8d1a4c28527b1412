"""Common English words for prompts built without a tokenizer.

Each word of :data:`COMMON_WORDS` is a single token when preceded by a space in the vocabularies of
GPT-2, GPT-NeoX, GPT-3.5/4 (cl100k_base), GPT-4o (o200k_base), Llama 2 and Mistral (SentencePiece,
32k), Llama 3, Phi-3, Qwen2/2.5/3, Gemma, Command-R, DeepSeek and Falcon (checked against those
vocabularies when the list was made). Those of :data:`START_WORDS` are single tokens at the very start
of a text too (no leading space), where byte-level BPE vocabularies would otherwise split some words.
So a text that starts with a start word and goes on with common words joined by single spaces has as
many tokens as words in all of those families, before the special tokens a server adds.
"""

from __future__ import annotations

# Kept as text (not a list literal) so that the list reads as a paragraph rather than 483 lines.
START_WORDS: tuple[str, ...] = tuple(
    """
    the of and to in is was for on are with as his they be at one have this from or had by but what some
    we can out other were all there when up use your how said an each she which do their time if will
    way about many then them write would like so these her long make thing see him two has look more day
    could go come did number sound no most people my over know water than call first who may down side
    been now find any new work part take get place made live where after back little only round man year
    show every good me give our under name very through just form great think say help low line turn
    cause much mean before move right boy old too same tell does set three want air well also play small
    end put home read hand port large add even land here must big high such follow act why ask men
    change went light kind off need house picture try us again animal point mother world near build self
    earth father head stand own page should country found answer school grow study still learn plant
    cover food sun four between state keep eye never last let thought city tree cross hard start might
    story far sea draw left late run while press close night real life few north open next white
    children begin got walk example paper group always music those both mark often letter until mile
    river car care second book science eat room friend fish stop once base horse cut sure watch color
    face wood main plain girl usual young ready above ever red list though feel talk bird soon body dog
    family direct pose leave song door product black short class wind question complete ship area half
    rock order fire south problem piece pass since top king space heard best hour better true during
    five remember step early hold west ground interest reach fast verb sing six table travel less ten
    simple war lay against pattern slow center love person money road map rain rule pull cold notice
    voice unit power town fine fly fall lead cry dark machine note wait plan figure star box field rest
    correct able done drive stood front week final green quick develop warm free minute strong special
    mind clear tail fact street nothing course stay wheel full force blue object surface deep foot
    system test record boat common gold plane stead dry ago ran check game shape hot miss heat bring yes
    fill east language among
    """.split()  # noqa: SIM905
)

COMMON_WORDS: tuple[str, ...] = START_WORDS + tuple(
    """
    came sentence differ spell farm saw seem together ease feet carry took began idea mountain hear
    enough measure happen told knew whole hundred listen morning several toward serve appear govern
    certain beauty contain teach gave ocean behind produce multiply decide moon island busy possible
    wonder laugh thousand brought snow distant paint
    """.split()  # noqa: SIM905
)
