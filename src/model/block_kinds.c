/* Which kinds a block is made of, and the table of kinds (model/block_kinds.h). */
#include "model/block_kinds.h"

#include "model/families.h"

static const mt_part_kind *const mixers[MT_MIXER_KINDS] = {[MT_MIXER_ATTENTION] = &mt_mixer_attention,
                                                          [MT_MIXER_GDN] = &mt_mixer_gdn};
static const mt_part_kind *const ffns[MT_FFN_KINDS] = {[MT_FFN_DENSE] = &mt_ffn_dense, [MT_FFN_MOE] = &mt_ffn_moe};

mt_block_kinds mt_block_kinds_of(const mt_config *c, int l) {
    mt_layer_spec s = mt_layer_spec_of(c, l);
    return (mt_block_kinds){s.mixer, s.ffn};
}

const mt_part_kind *mt_mixer_kind_of(mt_mixer_kind k) { return mixers[k]; }
const mt_part_kind *mt_ffn_kind_of(mt_ffn_kind k) { return ffns[k]; }
